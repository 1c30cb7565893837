"""B10: the webhook URL guard refuses internal destinations at save and delivery time."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from jobdesk.shared.webhooks.ssrf import (
    PrivateAddressError,
    ResolutionError,
    UnsafeURLError,
    check_url,
)


def resolver_for(*addresses: str) -> Any:
    def resolve(host: str, port: int, **_: Any) -> list[tuple[Any, ...]]:
        family = socket.AF_INET6
        return [
            (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
            for a in addresses
        ] or [(family,)]

    return resolve


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("file:///etc/passwd", "only http and https"),
        ("gopher://example.com/", "only http and https"),
        ("http://user:pass@example.com/", "user name or password"),
        ("http://user@example.com/", "user name or password"),
        ("http://127.0.0.1/", "loopback"),
        ("http://2130706433/", "ambiguous numeric"),
        ("http://0x7f000001/", "ambiguous numeric"),
        ("http://0177.0.0.1/", "ambiguous numeric"),
        ("http://127.1/", "ambiguous numeric"),
        ("http://[::1]/", "loopback"),
        ("http://[::ffff:127.0.0.1]/", "embeds 127.0.0.1"),
        ("http://[::ffff:10.0.0.5]/", "embeds 10.0.0.5"),
        ("http://[fd00::1]/", "unique-local"),
        ("http://[fe80::1%25eth0]/", "zone"),
        ("http://169.254.169.254/latest/meta-data", "link-local"),
        ("http://10.0.0.5/", "private"),
        ("http://192.168.1.1/", "private"),
        ("http://100.64.0.1/", "CGNAT"),
        ("http://0.0.0.0/", "unspecified"),
        ("http://224.0.0.1/", "multicast"),
        ("http://240.0.0.1/", "reserved"),
        ("http://localhost:8080/hook", "loopback"),
        ("http:///nohost", "no host"),
        ("http://exa mple.com/", "spaces or control"),
        ("", "empty"),
    ],
)
def test_unsafe_urls_are_refused(url: str, message: str) -> None:
    with pytest.raises(UnsafeURLError, match=message):
        check_url(url)


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("fec0::1", "site-local"),  # let through before: Python 3.11 calls it global
        ("feff:ffff::1", "site-local"),
        ("3fff::1", "documentation"),
        ("192.88.99.1", "6to4 relay anycast"),
        ("64:ff9b:1::a00:1", "local-use NAT64"),
        ("100::1", "discard-only"),
        ("2001:db8::1", "documentation"),
        ("5f00::1", "SRv6"),
        ("192.0.2.1", "documentation"),
        ("198.18.0.1", "benchmarking"),
        ("64:ff9b::a00:5", "embeds 10.0.0.5"),  # NAT64 to a private IPv4
        ("64:ff9b::7f00:1", "embeds 127.0.0.1"),
        ("::ffff:169.254.169.254", "embeds 169.254.169.254"),
        ("2002:a00:5::1", "embeds 10.0.0.5"),  # 6to4 around a private IPv4
        ("2002:7f00:1::1", "embeds 127.0.0.1"),
        ("::ffff:0:a00:5", "reserved"),  # IPv4-translated (SIIT)
        ("::a00:5", "reserved"),  # IPv4-compatible (deprecated)
        ("fe80::1", "link-local"),
        ("ff02::1", "multicast"),
    ],
)
def test_special_ipv6_and_ipv4_ranges_are_refused(address: str, reason: str) -> None:
    with pytest.raises(UnsafeURLError, match=reason):
        check_url("https://crm.example.com/hook", resolve=resolver_for(address))
    literal = f"[{address}]" if ":" in address else address
    with pytest.raises(UnsafeURLError, match=reason):
        check_url(f"https://{literal}/hook")


@pytest.mark.parametrize("address", ["2606:4700::1111", "64:ff9b::808:808", "2002:808:808::1"])
def test_public_ipv6_destinations_still_pass(address: str) -> None:
    """A public address, also reached through NAT64 or 6to4, is a fine destination."""
    vetted = check_url("https://crm.example.com/hook", resolve=resolver_for(address))
    assert vetted.addresses == (address,)


def test_a_name_resolving_to_a_private_address_is_refused() -> None:
    with pytest.raises(UnsafeURLError, match=r"10\.0\.0\.5 is a private address"):
        check_url("https://crm.example.com/hook", resolve=resolver_for("10.0.0.5"))


def test_a_private_target_names_the_setting_that_allows_it() -> None:
    """The refusal a developer meets first (a receiver on localhost) says how to allow
    it; refusals the setting does not lift do not mention it."""
    for url in ("http://127.0.0.1:9/hook", "http://localhost:9/hook"):
        with pytest.raises(PrivateAddressError, match="JOBDESK_ALLOW_PRIVATE_WEBHOOK_TARGETS=1"):
            check_url(url)
    resolved = r"^127\.0\.0\.1 is a loopback address \(localhost resolves to it\); "
    with pytest.raises(PrivateAddressError, match=resolved):
        check_url("http://localhost:9/hook", resolve=resolver_for("127.0.0.1"))
    for url in ("http://u:p@127.0.0.1/", "file:///etc/passwd", "http://2130706433/"):
        with pytest.raises(UnsafeURLError) as refused:
            check_url(url)
        assert not isinstance(refused.value, PrivateAddressError), url
        assert "JOBDESK_ALLOW_PRIVATE_WEBHOOK_TARGETS" not in str(refused.value)


def test_every_resolved_address_must_be_public() -> None:
    mixed = resolver_for("93.184.216.34", "127.0.0.1")
    with pytest.raises(UnsafeURLError, match="loopback"):
        check_url("https://crm.example.com/hook", resolve=mixed)


def test_public_url_is_vetted_with_its_addresses() -> None:
    target = check_url(
        "https://CRM.example.com:8443/hooks?x=1#frag",
        resolve=resolver_for("93.184.216.34", "2606:2800:220:1::1"),
    )
    assert target.host == "crm.example.com"
    assert target.port == 8443
    assert target.target == "/hooks?x=1"
    assert target.addresses == ("93.184.216.34", "2606:2800:220:1::1")
    assert target.host_header == "crm.example.com:8443"
    assert target.url_for("2606:2800:220:1::1") == "https://[2606:2800:220:1::1]:8443/hooks?x=1"


def test_allow_private_lifts_only_the_address_rule() -> None:
    assert check_url("http://127.0.0.1:9/", allow_private=True).addresses == ("127.0.0.1",)
    assert check_url("http://localhost/", allow_private=True).addresses
    with pytest.raises(UnsafeURLError):
        check_url("http://2130706433/", allow_private=True)
    with pytest.raises(UnsafeURLError):
        check_url("http://u:p@127.0.0.1/", allow_private=True)


def test_unresolvable_name_is_a_resolution_error() -> None:
    def fail(host: str, port: int, **_: Any) -> list[Any]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    with pytest.raises(ResolutionError, match="cannot resolve"):
        check_url("https://nowhere.invalid/", resolve=fail)
