"""Alerts: rules evaluated from the database, their open/resolved rows and notifications."""
