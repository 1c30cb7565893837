"""The host app's own `worker` package (no PermanentError here, on purpose)."""

OWNER = "host-app"
