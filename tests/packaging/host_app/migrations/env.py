"""A stray Alembic environment beside the app: Jobdesk must never run it."""

raise SystemExit("the host app's stray migrations/env.py was run by mistake")
