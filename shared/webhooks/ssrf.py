"""The webhook URL guard: which destinations Jobdesk may send requests to.

Webhook URLs are typed in by operators and sometimes by customers, so a URL must not
become a way to reach the worker's own network (cloud metadata at 169.254.169.254, the
database on 10.0.0.5, an admin port on 127.0.0.1). Checked when an endpoint is saved
and again at every delivery, because DNS answers change:

- only `http` and `https`; no user:password@ part; no control characters;
- IP literals only in plain dotted-decimal (or bracketed IPv6) form — `2130706433`,
  `0x7f.1` and `0177.0.0.1` all mean 127.0.0.1 to the C resolver and are refused;
- every address the name resolves to must be public: loopback, private, link-local,
  CGNAT (100.64/10), unique-local, multicast, unspecified and reserved ranges are
  refused, including IPv4 addresses hidden inside IPv6 (IPv4-mapped, 6to4, Teredo,
  NAT64), and the special ranges Python's `ipaddress` does not know or did not always
  know (`_SPECIAL`: deprecated site-local `fec0::/10`, the local-use NAT64 prefix,
  discard-only, documentation, SRv6 SIDs, the deprecated 6to4 relay anycast range);
- the caller connects to one of the vetted addresses (`VettedTarget.addresses`), not to
  the name again, so a second DNS answer cannot swap in a private address.

`allow_private=True` (setting `JOBDESK_ALLOW_PRIVATE_WEBHOOK_TARGETS`, off by default)
lifts only the address-range rule, for development and tests.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

MAX_URL_LENGTH = 2000
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$", re.IGNORECASE)
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
#: Non-public ranges named one by one, whatever this Python's `ipaddress` says of them
#: (its tables have changed between versions; `fec0::/10` counts as global in 3.11).
_SPECIAL: tuple[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str], ...] = tuple(
    (ipaddress.ip_network(network), reason)
    for network, reason in (
        ("fec0::/10", "a site-local address (deprecated, RFC 3879)"),
        ("64:ff9b:1::/48", "a local-use NAT64 address (RFC 8215)"),
        ("100::/64", "a discard-only address (RFC 6666)"),
        ("2001:db8::/32", "a documentation address"),
        ("3fff::/20", "a documentation address"),
        ("5f00::/16", "an SRv6 SID (RFC 9602)"),
        ("192.88.99.0/24", "a 6to4 relay anycast address (deprecated, RFC 7526)"),
        ("192.0.0.0/24", "an IETF protocol assignment"),
        ("198.18.0.0/15", "a benchmarking address"),
        ("192.0.2.0/24", "a documentation address"),
        ("198.51.100.0/24", "a documentation address"),
        ("203.0.113.0/24", "a documentation address"),
    )
)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[..., Sequence[tuple[Any, ...]]]


class UnsafeURLError(ValueError):
    """The URL may not be used as a webhook destination; the message says why."""


class PrivateAddressError(UnsafeURLError):
    """The URL is well-formed but leads to a non-public address: the one rule that
    `JOBDESK_ALLOW_PRIVATE_WEBHOOK_TARGETS` lifts, so the message names it."""

    def __init__(self, reason: str) -> None:
        super().__init__(
            f"{reason}; webhook targets must be public addresses "
            "(JOBDESK_ALLOW_PRIVATE_WEBHOOK_TARGETS=1 allows private and loopback ones, "
            "for development and tests only)"
        )


class ResolutionError(OSError):
    """The host name did not resolve (may be temporary: DNS outage)."""


@dataclass(frozen=True)
class VettedTarget:
    """A URL that passed the guard, with the addresses it may be reached at."""

    url: str
    scheme: str
    host: str
    port: int
    target: str
    """Path and query to request (`/hooks?x=1`)."""
    addresses: tuple[str, ...]

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"

    def url_for(self, address: str) -> str:
        """The URL with the host replaced by one vetted address (connect there)."""
        literal = f"[{address}]" if ":" in address else address
        return f"{self.scheme}://{literal}:{self.port}{self.target}"


@dataclass(frozen=True)
class ParsedURL:
    scheme: str
    host: str
    port: int
    target: str
    literal: IPAddress | None


def parse_url(url: str) -> ParsedURL:
    """Syntactic checks only (no DNS)."""
    if not isinstance(url, str) or not url:
        raise UnsafeURLError("URL is empty")
    if len(url) > MAX_URL_LENGTH:
        raise UnsafeURLError(f"URL is longer than {MAX_URL_LENGTH} characters")
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise UnsafeURLError("URL contains spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UnsafeURLError(f"URL cannot be parsed: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise UnsafeURLError(f"only http and https URLs are allowed, not {scheme or 'none'!r}")
    if "@" in parts.netloc:
        raise UnsafeURLError("URL must not contain a user name or password")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise UnsafeURLError("URL has no host")
    if port == 0:
        raise UnsafeURLError("port 0 is not allowed")
    literal = _ip_literal(host)
    if literal is None:
        try:
            host = host.encode("idna").decode("ascii").lower()
        except UnicodeError:
            raise UnsafeURLError(f"host name {host!r} is not valid") from None
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return ParsedURL(
        scheme=scheme,
        host=str(literal) if literal is not None else host,
        port=port or (443 if scheme == "https" else 80),
        target=target,
        literal=literal,
    )


def _ip_literal(host: str) -> IPAddress | None:
    if ":" in host:
        if "%" in host:
            raise UnsafeURLError("IPv6 zone identifiers are not allowed")
        try:
            return ipaddress.IPv6Address(host)
        except ValueError:
            raise UnsafeURLError(f"{host!r} is not a valid IPv6 address") from None
    labels = host.split(".")
    if all(_NUMERIC_LABEL.match(label) for label in labels):
        try:
            return ipaddress.IPv4Address(host)
        except ValueError:
            raise UnsafeURLError(
                f"{host!r} is an ambiguous numeric address; write IPv4 as dotted decimal"
            ) from None
    return None


def forbidden_reason(address: IPAddress) -> str | None:
    """Why a destination address is refused, or None when it is public."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address.teredo:
            embedded = address.teredo[1]
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            inner = forbidden_reason(embedded)
            return f"{address} embeds {embedded}: {inner}" if inner else None
    for network, special in _SPECIAL:
        if address.version == network.version and address in network:
            return f"{address} is {special}"
    checks = (
        (address.is_unspecified, "an unspecified address"),
        (address.is_loopback, "a loopback address"),
        (address.is_link_local, "a link-local address"),
        (address.is_multicast, "a multicast address"),
        (isinstance(address, ipaddress.IPv4Address) and address in _CGNAT, "a CGNAT address"),
        (
            isinstance(address, ipaddress.IPv6Address)
            and address in ipaddress.IPv6Network("fc00::/7"),
            "a unique-local address",
        ),
        (address.is_reserved, "a reserved address"),
        (address.is_private, "a private address"),
        (not address.is_global, "not a public address"),
    )
    for hit, reason in checks:
        if hit:
            return f"{address} is {reason}"
    return None


def check_url(
    url: str, *, allow_private: bool = False, resolve: Resolver = socket.getaddrinfo
) -> VettedTarget:
    """Vet `url` for a webhook request; raises `UnsafeURLError` (never retry; its
    subclass `PrivateAddressError` for a non-public address) or `ResolutionError` (the
    name did not resolve — may be temporary)."""
    parsed = parse_url(url)
    if parsed.literal is not None:
        addresses: list[IPAddress] = [parsed.literal]
    else:
        addresses = _resolve(parsed.host, parsed.port, resolve)
    if not allow_private:
        for address in addresses:
            reason = forbidden_reason(address)
            if reason:
                where = "" if parsed.literal is not None else f" ({parsed.host} resolves to it)"
                raise PrivateAddressError(f"{reason}{where}")
    unique = tuple(dict.fromkeys(str(a) for a in addresses))
    return VettedTarget(
        url=url,
        scheme=parsed.scheme,
        host=parsed.host,
        port=parsed.port,
        target=parsed.target,
        addresses=unique,
    )


def _resolve(host: str, port: int, resolve: Resolver) -> list[IPAddress]:
    try:
        infos = resolve(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise ResolutionError(f"cannot resolve {host}: {exc}") from None
    found: list[IPAddress] = []
    for info in infos:
        raw = str(info[4][0]).split("%", 1)[0]
        try:
            found.append(ipaddress.ip_address(raw))
        except ValueError:
            continue
    if not found:
        raise ResolutionError(f"{host} has no usable address")
    return found
