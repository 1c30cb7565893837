"""Building the app: `create_app()` (standalone) and `init_dashboard()` (mounted)."""

from __future__ import annotations

import logging
from datetime import timedelta

import sqlalchemy as sa
from flask import Flask, render_template

from jobdesk.dashboard import compiled_templates, routing, templating
from jobdesk.dashboard.proxy import ForwardedFor, TrustedProxies
from jobdesk.dashboard.security import SessionInterface, apply_headers
from jobdesk.dashboard.state import EXTENSION_KEY, DashboardState, IdentityLoader
from jobdesk.dashboard.url_rules import LazyBuilderRule
from jobdesk.shared.core.db import make_engine
from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.job_types import JobModuleError, load_modules
from jobdesk.shared.settings import Settings, SettingsError

log = logging.getLogger("jobdesk.dashboard")

MIN_SECRET_KEY_CHARS = 32
#: Text that marks a key copied from an example file rather than generated.
_PLACEHOLDER_MARKERS = ("change-me", "changeme", "change_me", "replace-me", "your-secret")
_PLACEHOLDER_KEYS = frozenset(
    {
        "changeme",
        "change-me",
        "change_me",
        "secret",
        "dev",
        "development",
        "default",
        "jobdesk",
        "insecure",
        "please-change-me",
        "replace-me",
        "xxx",
        "test",
    }
)


class SecretKeyError(RuntimeError):
    """The dashboard will not sign sessions with an empty or guessable key."""


def check_secret_key(key: str) -> str:
    hint = (
        "set JOBDESK_SECRET_KEY to a long random value, e.g. "
        "`python -c 'import secrets; print(secrets.token_urlsafe(48))'` "
        "(or run `jobdesk dashboard --dev` for a throwaway local key)"
    )
    if not key:
        raise SecretKeyError(f"JOBDESK_SECRET_KEY is not set; {hint}")
    lowered = key.strip().lower()
    if lowered in _PLACEHOLDER_KEYS or any(m in lowered for m in _PLACEHOLDER_MARKERS):
        raise SecretKeyError(f"JOBDESK_SECRET_KEY is a placeholder value; {hint}")
    # Length before variety: a short key is refused as short, whatever it is made of.
    if len(key) < MIN_SECRET_KEY_CHARS:
        raise SecretKeyError(
            f"JOBDESK_SECRET_KEY is too short: {len(key)} characters, it needs at least "
            f"{MIN_SECRET_KEY_CHARS}; {hint}"
        )
    if len(set(key)) < 8:
        raise SecretKeyError(
            f"JOBDESK_SECRET_KEY is a placeholder value ({len(set(key))} distinct characters "
            f"in {len(key)}, not a random key); {hint}"
        )
    return key


def check_proxy_trust(settings: Settings) -> None:
    """Refuse a proxy set-up where anyone could name the logged-in user."""
    try:
        trusted = TrustedProxies(settings.trusted_proxies)
    except ValueError as exc:
        raise SettingsError(f"JOBDESK_TRUSTED_PROXIES: {exc}") from None
    if not settings.trusted_proxy_header:
        return
    if trusted.trusts_everyone:
        raise SettingsError(
            "JOBDESK_TRUSTED_PROXIES trusts every address while JOBDESK_TRUSTED_PROXY_HEADER "
            "is set: anyone could log in as anyone; list only your SSO proxy's addresses"
        )
    wide = trusted.beyond_private_ranges()
    if wide:
        raise SettingsError(
            f"JOBDESK_TRUSTED_PROXIES includes {', '.join(str(n) for n in wide)} while "
            "JOBDESK_TRUSTED_PROXY_HEADER is set: anyone with an address there could log in "
            "as anyone. With the SSO header only loopback (127.0.0.0/8, ::1), private "
            "(10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, fc00::/7) and link-local "
            "(169.254.0.0/16, fe80::/10) networks may be trusted: put the SSO proxy on one"
        )


def _engines(settings: Settings, engine: sa.Engine | None) -> tuple[sa.Engine, sa.Engine, bool]:
    if engine is not None:
        return engine, engine, False
    write = make_engine(settings=settings, application_name="jobdesk-dashboard")
    if not driver(write).locks_rows:
        # A write transaction takes the whole database (SQLite): pages read through an
        # engine whose transactions never ask for the write lock.
        read = make_engine(
            settings=settings, sqlite_begin="DEFERRED", application_name="jobdesk-dashboard"
        )
        return read, write, True
    return write, write, True


def _import_job_modules(settings: Settings) -> None:
    """The app's job modules declare the payload checks the fix form applies
    (`@job(validate=…)`). A module that does not import here (a worker-only dependency)
    leaves the dashboard running without its checks, and says so."""
    try:
        load_modules(settings.job_modules)
    except JobModuleError as exc:
        log.warning(
            "%s; the fix form will not apply that module's payload checks",
            exc,
            extra={"action": "job_module_unavailable"},
        )


def init_dashboard(
    app: Flask,
    *,
    settings: Settings | None = None,
    engine: sa.Engine | None = None,
    url_prefix: str | None = None,
    identity_loader: IdentityLoader | None = None,
) -> Flask:
    """Mount the dashboard on `app` (under `url_prefix`, e.g. "/jobdesk").

    Standalone apps and hosts without their own login use the dashboard's operators.
    A host that authenticates users itself passes `identity_loader`, a function
    returning `jobdesk.dashboard.state.Identity(username, role)` for the current request (or
    None → 401); the dashboard's role checks and CSRF protection still apply.
    """
    from jobdesk.dashboard import metrics
    from jobdesk.dashboard.web import bp

    settings = settings or Settings.from_env()
    if not app.secret_key:
        app.secret_key = check_secret_key(settings.secret_key)
    else:
        check_secret_key(str(app.secret_key))
    app.config.setdefault("SESSION_COOKIE_HTTPONLY", True)
    app.config["SESSION_COOKIE_HTTPONLY"] = True
    app.config["SESSION_COOKIE_SAMESITE"] = app.config.get("SESSION_COOKIE_SAMESITE") or "Lax"
    check_proxy_trust(settings)
    _import_job_modules(settings)
    read, write, owned = _engines(settings, engine)
    app.extensions[EXTENSION_KEY] = DashboardState(
        settings=settings,
        read_engine=read,
        write_engine=write,
        owns_engines=owned,
        identity_loader=identity_loader,
    )
    templating.install(app)
    app.url_map.converters[routing.NAME] = routing.IdConverter
    app.register_blueprint(bp, url_prefix=url_prefix)
    app.register_blueprint(metrics.bp, url_prefix=url_prefix)
    return app


def create_app(
    settings: Settings | None = None,
    engine: sa.Engine | None = None,
    *,
    identity_loader: IdentityLoader | None = None,
) -> Flask:
    """The standalone dashboard (`gunicorn 'dashboard:create_app()'`)."""
    settings = settings or Settings.from_env()
    app = Flask("dashboard", static_folder=None)
    app.url_rule_class = LazyBuilderRule
    app.config["SESSION_COOKIE_NAME"] = "jobdesk_session"
    # Set, not setdefault: Flask already fills it with 31 days. The server checks the
    # lifetime itself on every request (auth._session_identity), mounted or not.
    app.config["PERMANENT_SESSION_LIFETIME"] = timedelta(seconds=settings.session_lifetime_seconds)
    app.session_interface = SessionInterface()
    app.secret_key = check_secret_key(settings.secret_key)
    init_dashboard(app, settings=settings, engine=engine, identity_loader=identity_loader)
    # The environment is this app's own (a host's, when mounted, is left alone): it gets
    # the templates other apps of this process compiled already.
    app.jinja_env.bytecode_cache = compiled_templates.COMPILED
    app.after_request(apply_headers)
    state: DashboardState = app.extensions[EXTENSION_KEY]
    # Set, not setdefault (Flask fills it with None). Dashboard routes apply the same limit
    # per request (web._limit_body); this covers every other route of the standalone app.
    app.config["MAX_CONTENT_LENGTH"] = state.request_body_limit
    app.wsgi_app = ForwardedFor(app.wsgi_app, state.trusted_proxies)  # type: ignore[method-assign]

    @app.errorhandler(404)
    def _not_found(_error: Exception) -> tuple[str, int]:
        return render_template("errors/error.html", status=404, message="Not found."), 404

    @app.errorhandler(405)
    def _bad_method(_error: Exception) -> tuple[str, int]:
        return render_template(
            "errors/error.html", status=405, message="That method is not allowed here."
        ), 405

    @app.errorhandler(413)
    def _too_large(_error: Exception) -> tuple[str, int]:
        return render_template(
            "errors/error.html", status=413, message="The submitted form is too large."
        ), 413

    return app
