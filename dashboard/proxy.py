"""The real client address behind a trusted reverse proxy.

gunicorn reports the TCP peer as `REMOTE_ADDR`; behind a TLS proxy on the same host
that is always 127.0.0.1, which would make every visitor look local to the `/metrics`
loopback check and share one login rate-limit bucket. When the peer is one of the
trusted proxies (`JOBDESK_FORWARDED_ALLOW_IPS`, default loopback), the client address
is taken from the last `X-Forwarded-For` entry — the one that proxy appended itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

DEFAULT_TRUSTED = ("127.0.0.1", "::1")


class ForwardedFor:
    """WSGI middleware: `REMOTE_ADDR` = the client a trusted proxy says it forwarded."""

    def __init__(self, app: Any, trusted: Iterable[str] = DEFAULT_TRUSTED) -> None:
        self.app = app
        self.trusted = frozenset(address.strip() for address in trusted if address.strip())

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        peer = environ.get("REMOTE_ADDR", "")
        forwarded = environ.get("HTTP_X_FORWARDED_FOR", "")
        if forwarded and ("*" in self.trusted or peer in self.trusted):
            client = forwarded.split(",")[-1].strip()
            if client:
                environ["jobdesk.proxy_peer"] = peer
                environ["REMOTE_ADDR"] = client
        return self.app(environ, start_response)
