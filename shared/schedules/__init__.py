"""Recurring jobs: schedules declared in code, stored so every host and the dashboard
see them, fired by the maintenance leader exactly once per slot."""
