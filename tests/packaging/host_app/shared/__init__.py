"""The host app's own `shared` package: Jobdesk must never shadow or replace it."""

OWNER = "host-app"
