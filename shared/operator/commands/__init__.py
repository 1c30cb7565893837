"""Operator commands: each validates its input, changes state through the driver or its
feature's store, and leaves its audit row through `jobdesk.shared.core.audit` — in the
caller's transaction. The dashboard's POST views and the CLI call the same commands."""
