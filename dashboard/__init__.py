"""The Jobdesk operator dashboard: a Flask + htmx app over `shared/` (never the worker).

`create_app()` builds a standalone app (`gunicorn 'jobdesk.dashboard:create_app()'`);
`init_dashboard(app, url_prefix=...)` mounts the same pages inside a host Flask app.
Configuration comes from `JOBDESK_*` settings; the app refuses to start without a real
`JOBDESK_SECRET_KEY`.
"""

from __future__ import annotations

if __name__ != "jobdesk.dashboard":  # `import dashboard` would load a second copy of each module
    raise ImportError(
        f"import jobdesk.dashboard, not {__name__}: Jobdesk's only import name is `jobdesk`"
    )

from jobdesk.dashboard.app import create_app, init_dashboard

__all__ = ["create_app", "init_dashboard"]
