"""Which requests come through a trusted reverse proxy, and who the client really is.

One setting decides it, `JOBDESK_TRUSTED_PROXIES` (addresses or CIDR networks, default
loopback), and it is always checked against the **TCP peer** — the socket address the
server reports as `REMOTE_ADDR` before anything here rewrites it — never against what a
header claims:

- from a trusted peer, `X-Forwarded-For` is read from the right: each entry that is
  itself a trusted proxy is a hop, the first one that is not is the client. That address
  becomes `REMOTE_ADDR` (the login rate limit and the `/metrics` loopback check use it).
  The entries to its left were written by the client and are never looked at. The
  peer's `X-Forwarded-Proto` (`http`/`https`) sets the scheme (Secure cookies, Origin);
- from any other peer the forwarded headers are ignored;
- the SSO user header (`auth.py`) is believed only when the TCP peer itself is trusted.

The TCP peer stays available as `environ["jobdesk.peer"]` (`tcp_peer()`), also when the
dashboard is mounted in a host app behind Werkzeug's `ProxyFix`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

from jobdesk.shared.settings.parsing import Network, networks

DEFAULT_TRUSTED = ("127.0.0.1", "::1")
PEER_KEY = "jobdesk.peer"
#: Forwarded-For chains longer than this are cut (a client may send anything).
MAX_HOPS = 20
_SCHEMES = frozenset({"http", "https"})


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(text.strip().strip("[]"))
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


class TrustedProxies:
    """The parsed `JOBDESK_TRUSTED_PROXIES`: is an address one of our proxies?"""

    def __init__(self, entries: Iterable[str] = DEFAULT_TRUSTED) -> None:
        self.networks: tuple[Network, ...] = networks(e for e in entries if e.strip())

    def __bool__(self) -> bool:
        return bool(self.networks)

    @property
    def trusts_everyone(self) -> bool:
        return any(network.prefixlen == 0 for network in self.networks)

    def trusts(self, address: str | None) -> bool:
        parsed = _address(address or "")
        if parsed is None:
            return False
        return any(
            parsed.version == network.version and parsed in network for network in self.networks
        )

    def client(self, peer: str, forwarded_for: str) -> str:
        """The client address for a request from `peer` carrying `forwarded_for`."""
        if not self.trusts(peer):
            return peer
        hops = [entry.strip() for entry in forwarded_for.split(",") if entry.strip()]
        current = peer
        for entry in reversed(hops[-MAX_HOPS:]):
            if _address(entry) is None:
                break  # garbage: the last trusted hop is as far as we can see
            current = entry.strip("[]")
            if not self.trusts(current):
                break
        return current


def tcp_peer(environ: Mapping[str, Any]) -> str | None:
    """The socket peer of this request, before any forwarded-header rewriting."""
    peer = environ.get(PEER_KEY)
    if isinstance(peer, str):
        return peer
    original = environ.get("werkzeug.proxy_fix.orig")
    if isinstance(original, Mapping) and isinstance(original.get("REMOTE_ADDR"), str):
        return str(original["REMOTE_ADDR"])
    address = environ.get("REMOTE_ADDR")
    return address if isinstance(address, str) else None


class ForwardedFor:
    """WSGI middleware: `REMOTE_ADDR` and the scheme as a trusted proxy forwarded them."""

    def __init__(self, app: Any, trusted: TrustedProxies | Iterable[str] = DEFAULT_TRUSTED) -> None:
        self.app = app
        self.trusted = trusted if isinstance(trusted, TrustedProxies) else TrustedProxies(trusted)

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        peer = environ.get("REMOTE_ADDR", "")
        environ.setdefault(PEER_KEY, peer)
        if self.trusted.trusts(peer):
            forwarded = environ.get("HTTP_X_FORWARDED_FOR", "")
            if forwarded:
                environ["REMOTE_ADDR"] = self.trusted.client(peer, forwarded)
            proto = environ.get("HTTP_X_FORWARDED_PROTO", "").split(",")[-1].strip().lower()
            if proto in _SCHEMES:
                environ["wsgi.url_scheme"] = proto
        return self.app(environ, start_response)
