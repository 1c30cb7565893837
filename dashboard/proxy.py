"""Which requests come through a trusted reverse proxy, and who the client really is.

One setting decides it, `JOBDESK_TRUSTED_PROXIES` (addresses or CIDR networks, default
loopback), and it is always checked against the **TCP peer** — the socket address the
server reports as `REMOTE_ADDR` before anything here rewrites it — never against what a
header claims:

- from a trusted peer, `X-Forwarded-For` is read from the right: each entry that is
  itself a trusted proxy is a hop, the first one that is not is the client. That address
  becomes `REMOTE_ADDR` (the login rate limit and the `/metrics` loopback check use it).
  The entries to its left were written by the client and are never looked at. An entry
  may carry a port (`203.0.113.9:51234`, `[2001:db8::1]:443`); one that is no address
  at all (`unknown`, `unix:`, an obfuscated `_hidden`) where the client should be means
  the client is unknown: `REMOTE_ADDR` becomes `unknown(<that entry>)` — never the
  proxy's own address, which would hand every such client the proxy's standing (a
  loopback proxy's `/metrics` access, one shared login rate-limit bucket with the proxy
  itself). A proxy that writes one word for all its clients puts them in one bucket; one
  that writes a stable token per client keeps them apart. The same holds past
  `MAX_HOPS` trusted hops. The peer's `X-Forwarded-Proto` (`http`/`https`) sets the
  scheme (Secure cookies, Origin);
- from any other peer the forwarded headers are ignored;
- the SSO user header (`auth.py`) is believed only when the TCP peer itself is trusted.

The TCP peer stays available as `environ["jobdesk.peer"]` (`tcp_peer()`), also when the
dashboard is mounted in a host app behind Werkzeug's `ProxyFix`.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from typing import Any

from jobdesk.shared.settings.parsing import Network, networks

DEFAULT_TRUSTED = ("127.0.0.1", "::1")
PEER_KEY = "jobdesk.peer"
#: Where an SSO proxy may be: loopback, private (RFC 1918, IPv6 unique-local) and
#: link-local networks. Trusting anything wider with the SSO header set would let
#: whoever holds an address there log in as anyone (`beyond_private_ranges`).
SSO_TRUSTABLE: tuple[Network, ...] = tuple(
    ipaddress.ip_network(network)
    for network in (
        "127.0.0.0/8",
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "169.254.0.0/16",
        "::1/128",
        "fc00::/7",
        "fe80::/10",
    )
)
#: Forwarded-For chains longer than this are cut (a client may send anything).
MAX_HOPS = 20
_SCHEMES = frozenset({"http", "https"})
#: An address with a port, as some proxies forward it: `1.2.3.4:80`, `[::1]:443`.
_WITH_PORT = re.compile(r"\[(?P<v6>[^\]]+)\]:\d{1,5}|(?P<v4>[0-9.]+):\d{1,5}")
#: What of an entry that is no address is kept in `unknown(…)`.
_TOKEN_CHARS = re.compile(r"[^A-Za-z0-9._:-]")
UNKNOWN_TOKEN_CHARS = 64


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    text = text.strip()
    with_port = _WITH_PORT.fullmatch(text)
    if with_port is not None:
        text = with_port.group("v6") or with_port.group("v4")
    try:
        address = ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _inside(network: Network, outer: Network) -> bool:
    if isinstance(network, ipaddress.IPv4Network) and isinstance(outer, ipaddress.IPv4Network):
        return network.subnet_of(outer)
    if isinstance(network, ipaddress.IPv6Network) and isinstance(outer, ipaddress.IPv6Network):
        return network.subnet_of(outer)
    return False


class TrustedProxies:
    """The parsed `JOBDESK_TRUSTED_PROXIES`: is an address one of our proxies?"""

    def __init__(self, entries: Iterable[str] = DEFAULT_TRUSTED) -> None:
        self.networks: tuple[Network, ...] = networks(e for e in entries if e.strip())

    def __bool__(self) -> bool:
        return bool(self.networks)

    @property
    def trusts_everyone(self) -> bool:
        return any(network.prefixlen == 0 for network in self.networks)

    def beyond_private_ranges(self) -> tuple[Network, ...]:
        """The trusted networks that reach past loopback, private and link-local space
        (`SSO_TRUSTABLE`): with the SSO header set, anyone there could name any user."""
        return tuple(
            network
            for network in self.networks
            if not any(_inside(network, allowed) for allowed in SSO_TRUSTABLE)
        )

    def trusts(self, address: str | None) -> bool:
        parsed = _address(address or "")
        if parsed is None:
            return False
        return any(
            parsed.version == network.version and parsed in network for network in self.networks
        )

    def client(self, peer: str, forwarded_for: str) -> str:
        """The client address for a request from `peer` carrying `forwarded_for`, or
        `unknown(…)` when the entry where it should be is no address (see the module)."""
        if not self.trusts(peer):
            return peer
        hops = [entry.strip() for entry in forwarded_for.split(",") if entry.strip()]
        current = peer
        for entry in reversed(hops[-MAX_HOPS:]):
            address = _address(entry)
            if address is None:
                return unknown_client(entry)
            current = str(address)
            if not self.trusts(current):
                return current
        if len(hops) > MAX_HOPS:
            return unknown_client("too-many-hops")
        return current


def unknown_client(entry: str) -> str:
    """`REMOTE_ADDR` for a client its proxy did not name by address: never an address
    (so never trusted, never loopback), keyed by what the proxy wrote."""
    return f"unknown({_TOKEN_CHARS.sub('', entry)[:UNKNOWN_TOKEN_CHARS]})"


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
