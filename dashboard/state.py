"""The dashboard's per-app state (`app.extensions["jobdesk"]`): settings, engines, the
trusted proxies and the optional identity hook of a host app. (The login throttle lives
in the database: `shared.operator.login_throttle`.)"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from flask import current_app

from jobdesk.dashboard.cache import TTLCache
from jobdesk.dashboard.proxy import TrustedProxies
from jobdesk.shared.settings import Settings

EXTENSION_KEY = "jobdesk"


@dataclass(frozen=True, slots=True)
class Identity:
    """Who is asking: a username and a role (viewer, operator, admin), and the IANA
    zone they chose to read times in (None: their browser's)."""

    username: str
    role: str
    source: str = "password"
    timezone: str | None = None


#: A host app's hook: return the Identity of the current request, or None (→ 401).
IdentityLoader = Callable[[], Identity | None]


@dataclass
class DashboardState:
    settings: Settings
    read_engine: sa.Engine
    write_engine: sa.Engine
    owns_engines: bool
    identity_loader: IdentityLoader | None = None
    overview_cache: TTLCache[Any] = field(init=False)
    trusted_proxies: TrustedProxies = field(init=False)

    def __post_init__(self) -> None:
        self.overview_cache = TTLCache(self.settings.dashboard_overview_cache_seconds)
        self.trusted_proxies = TrustedProxies(self.settings.trusted_proxies)

    @property
    def request_body_limit(self) -> int:
        """The largest request body the dashboard reads: a fix form carries one payload
        as indented JSON text (room for twice the payload limit) plus a few fields."""
        return 2 * self.settings.max_payload_bytes + 64 * 1024

    @property
    def statement_timeout(self) -> float:
        return self.settings.dashboard_statement_timeout_seconds

    @property
    def secure_cookies(self) -> bool:
        return self.settings.secure_cookies

    @property
    def proxy_default_role(self) -> str | None:
        return self.settings.trusted_proxy_default_role

    @property
    def worker_stale_after(self) -> timedelta:
        return timedelta(seconds=max(3 * self.settings.heartbeat_seconds, 30.0))

    def dispose(self) -> None:
        if self.owns_engines:
            self.read_engine.dispose()
            if self.write_engine is not self.read_engine:
                self.write_engine.dispose()


def get_state() -> DashboardState:
    state: DashboardState = current_app.extensions[EXTENSION_KEY]
    return state
