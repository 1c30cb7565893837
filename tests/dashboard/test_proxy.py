"""Behind a trusted proxy the dashboard sees the real client address — and trust itself
(forwarded headers, the SSO user header) is decided on the TCP peer, by one setting."""

import importlib.util
import os
import re
import secrets
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask

from jobdesk.dashboard import create_app
from jobdesk.dashboard.proxy import TrustedProxies
from jobdesk.shared.settings import SettingsError
from tests.dashboard.conftest import add_user, dead_job
from tests.factories import env_settings

# Roles, headers, forms and rendering: the same on either database.
pytestmark = pytest.mark.one_database

ROOT = Path(__file__).resolve().parents[2]


def _app(engine: sa.Engine, **extra: str) -> Flask:
    settings = env_settings(extra, secret_key=secrets.token_urlsafe(48))
    return create_app(settings, engine)


def _client(engine: sa.Engine, **extra: str):  # type: ignore[no-untyped-def]
    return _app(engine, **extra).test_client()


def test_metrics_refuses_a_remote_client_forwarded_by_the_local_proxy(engine: sa.Engine) -> None:
    client = _client(engine)
    forwarded = client.get(
        "/metrics",
        environ_base={"REMOTE_ADDR": "127.0.0.1"},
        headers={"X-Forwarded-For": "203.0.113.9"},
    )
    assert forwarded.status_code == 403
    local = client.get("/metrics", environ_base={"REMOTE_ADDR": "127.0.0.1"})
    assert local.status_code == 200


def test_forwarded_for_from_an_untrusted_peer_is_ignored(engine: sa.Engine) -> None:
    client = _client(engine, trusted_proxies="10.0.0.1")
    spoofed = client.get(
        "/metrics",
        environ_base={"REMOTE_ADDR": "198.51.100.7"},
        headers={"X-Forwarded-For": "127.0.0.1"},
    )
    assert spoofed.status_code == 403


def test_entries_a_client_wrote_left_of_the_proxys_own_are_never_the_client(
    engine: sa.Engine,
) -> None:
    client = _client(engine)
    spoofed = client.get(
        "/metrics",
        environ_base={"REMOTE_ADDR": "127.0.0.1"},
        headers={"X-Forwarded-For": "127.0.0.1, 203.0.113.9"},
    )
    assert spoofed.status_code == 403


# --- SSO: trust on the TCP peer ------------------------------------------------------------


def _sso(engine: sa.Engine, **extra: str) -> Flask:
    add_user(engine, "alice", "admin")
    return _app(engine, trusted_proxy_header="X-Forwarded-User", **extra)


def _as(app: Flask, peer: str, **headers: str) -> Any:
    return app.test_client().get("/", headers=headers, environ_base={"REMOTE_ADDR": peer})


def test_a_local_client_cannot_borrow_a_trusted_network_through_x_forwarded_for(
    engine: sa.Engine,
) -> None:
    """Issue 12 #6: with TRUSTED_PROXIES=10.0.0.0/8 a local client sending
    `X-Forwarded-For: 10.9.9.9` was logged in as whoever it named, admin POSTs included."""
    app = _sso(engine, trusted_proxies="10.0.0.0/8")
    with engine.begin() as conn:
        job_id = dead_job(conn)
    spoof = {"X-Forwarded-For": "10.9.9.9", "X-Forwarded-User": "alice"}
    page = _as(app, "127.0.0.1", **spoof)
    assert page.status_code == 303
    assert page.headers["Location"].startswith("/login")
    post = app.test_client().post(
        "/endpoints/crm/pause",
        data={"reason": "spoofed"},
        headers={**spoof, "Origin": "http://localhost"},
        environ_base={"REMOTE_ADDR": "127.0.0.1"},
    )
    assert post.status_code in (401, 403)
    retry = app.test_client().post(
        f"/jobs/{job_id}/retry", headers=spoof, environ_base={"REMOTE_ADDR": "127.0.0.1"}
    )
    assert retry.status_code in (401, 403)
    # The real proxy, connecting from its own address, is believed.
    real = _as(app, "10.1.2.3", **{"X-Forwarded-User": "alice"})
    assert real.status_code == 200
    assert "alice" in real.get_data(as_text=True)


def test_a_remote_client_cannot_name_itself_a_proxy(engine: sa.Engine) -> None:
    """Issue 12 #6: with JOBDESK_FORWARDED_ALLOW_IPS='*' any remote client's
    `X-Forwarded-For` was believed; that second setting is gone and a wildcard refused."""
    with pytest.raises(SettingsError, match="JOBDESK_FORWARDED_ALLOW_IPS is not a Jobdesk"):
        env_settings(forwarded_allow_ips="*")
    with pytest.raises(SettingsError, match="JOBDESK_TRUSTED_PROXIES"):
        env_settings(trusted_proxies="*")
    with pytest.raises(SettingsError, match="not an IP address or CIDR"):
        env_settings(trusted_proxies="proxy.internal")
    app = _sso(engine, trusted_proxies="10.0.0.0/8")
    remote = _as(
        app, "203.0.113.50", **{"X-Forwarded-For": "10.9.9.9", "X-Forwarded-User": "alice"}
    )
    assert remote.status_code == 303


def test_trusting_everyone_with_an_sso_header_refuses_to_start(engine: sa.Engine) -> None:
    with pytest.raises(SettingsError, match="anyone could log in as anyone"):
        _app(engine, trusted_proxy_header="X-Forwarded-User", trusted_proxies="0.0.0.0/0")


@pytest.mark.parametrize(
    "trusted",
    [
        "0.0.0.0/1",  # half the internet: no /0, still everyone there
        "128.0.0.0/1, ::/1",
        "203.0.113.7",  # one public address
        "10.0.0.0/7",  # reaches past 10/8 into 11/8
        "100.64.0.0/10",  # shared (carrier-grade NAT) space: other customers
        "172.16.0.0/11",
        "2001:db8::/32",
        "::ffff:10.0.0.0/104",  # never matches a peer: a mistake, not a proxy
        "127.0.0.1, 2000::/3",
    ],
)
def test_an_sso_header_trusts_only_private_networks(engine: sa.Engine, trusted: str) -> None:
    """Only `/0` was refused: `0.0.0.0/1` still let half the internet log in as anyone."""
    with pytest.raises(SettingsError, match="anyone with an address there could log in") as e:
        _app(engine, trusted_proxy_header="X-Forwarded-User", trusted_proxies=trusted)
    assert "JOBDESK_TRUSTED_PROXIES includes" in str(e.value)
    # Without the SSO header the same networks are fine (forwarded addresses only).
    _app(engine, trusted_proxies=trusted)


def test_private_proxy_networks_are_fine_with_an_sso_header(engine: sa.Engine) -> None:
    trusted = "127.0.0.1, 10.1.0.0/16, 172.16.0.0/12, 192.168.1.10, 169.254.1.1, ::1, fd00::/8"
    app = _app(
        engine, trusted_proxy_header="X-Forwarded-User", trusted_proxies=trusted + ", fe80::/64"
    )
    assert app is not None


def test_sso_behind_a_normal_appending_proxy(engine: sa.Engine) -> None:
    """nginx at 127.0.0.1 appends the client to X-Forwarded-For and sets the user."""
    app = _sso(engine)  # default trusted proxies: loopback
    page = _as(
        app,
        "127.0.0.1",
        **{"X-Forwarded-For": "198.51.100.7", "X-Forwarded-User": "alice"},
    )
    assert page.status_code == 200
    assert "alice" in page.get_data(as_text=True)
    # ... and the client address is the one the proxy appended (not loopback).
    metrics = app.test_client().get(
        "/metrics",
        headers={"X-Forwarded-For": "198.51.100.7"},
        environ_base={"REMOTE_ADDR": "127.0.0.1"},
    )
    assert metrics.status_code == 403


def test_a_chain_of_trusted_proxies_is_walked_from_the_right() -> None:
    trusted = TrustedProxies(["127.0.0.1", "10.0.0.0/8"])
    assert trusted.client("127.0.0.1", "203.0.113.1, 10.0.0.5") == "203.0.113.1"
    assert trusted.client("127.0.0.1", "6.6.6.6, 203.0.113.1, 10.0.0.5") == "203.0.113.1"
    assert trusted.client("203.0.113.9", "10.0.0.5") == "203.0.113.9"
    # Where the client should be, the trusted hop 10.0.0.5 wrote no address: the client
    # is unknown, not that proxy.
    assert trusted.client("127.0.0.1", "not-an-ip, 10.0.0.5") == "unknown(not-an-ip)"
    assert trusted.client("::ffff:127.0.0.1", "198.51.100.7") == "198.51.100.7"
    assert trusted.trusts("10.255.0.1")
    assert not trusted.trusts("11.0.0.1")
    assert not trusted.trusts("garbage")


def test_a_proxy_that_names_no_address_leaves_the_client_unknown() -> None:
    """An unparseable last `X-Forwarded-For` entry made the client look like the proxy:
    behind a loopback proxy, a loopback client (`/metrics` without a token), and every
    such client in the proxy's own login rate-limit bucket."""
    trusted = TrustedProxies(["127.0.0.1", "10.0.0.0/8"])
    assert trusted.client("127.0.0.1", "unknown") == "unknown(unknown)"
    assert trusted.client("127.0.0.1", "203.0.113.9, unix:") == "unknown(unix:)"
    assert trusted.client("127.0.0.1", "_hidden-a1") == "unknown(_hidden-a1)"
    # What is kept of the entry is short and plain (it ends up in logs and keys).
    assert trusted.client("127.0.0.1", "<script>" + "x" * 200) == "unknown(script" + "x" * 58 + ")"
    # A port is no reason to give up on the address.
    assert trusted.client("127.0.0.1", "203.0.113.9:51234") == "203.0.113.9"
    assert trusted.client("127.0.0.1", "[2001:db8::7]:443") == "2001:db8::7"
    assert trusted.client("127.0.0.1", "198.51.100.1, 10.0.0.5:8080") == "198.51.100.1"
    # More trusted hops than are read: who sent it is not known either.
    assert trusted.client("127.0.0.1", ", ".join(["10.0.0.5"] * 25)) == "unknown(too-many-hops)"
    assert trusted.client("127.0.0.1", ", ".join(["10.0.0.5"] * 3)) == "10.0.0.5"


def test_an_unknown_client_behind_the_loopback_proxy_is_not_local(engine: sa.Engine) -> None:
    client = _client(engine)
    for forwarded in ("unknown", "garbage", "unix:", "1.2.3.4.5"):
        response = client.get(
            "/metrics",
            environ_base={"REMOTE_ADDR": "127.0.0.1"},
            headers={"X-Forwarded-For": forwarded},
        )
        assert response.status_code == 403, forwarded


def test_unknown_clients_do_not_share_the_proxys_login_bucket(engine: sa.Engine) -> None:
    """Failed logins of a client its proxy named `unknown` drain that name's bucket, not
    the one of requests from the proxy's own address."""
    app = _app(engine)
    add_user(engine, "alice", "admin")

    def login(forwarded: str | None, password: str) -> int:
        client = app.test_client()
        page = client.get("/login", environ_base={"REMOTE_ADDR": "127.0.0.1"})
        token = re.search(r'name="csrf-token" content="([^"]+)"', page.get_data(as_text=True))
        assert token is not None
        headers = {"Origin": "http://localhost"}
        if forwarded is not None:
            headers["X-Forwarded-For"] = forwarded
        response = client.post(
            "/login",
            data={"csrf_token": token.group(1), "username": "bob", "password": password},
            headers=headers,
            environ_base={"REMOTE_ADDR": "127.0.0.1"},
        )
        return response.status_code

    # 20 failures per address in 15 minutes, then 429 for that address.
    statuses = [login("unknown", f"wrong-password-{n}") for n in range(21)]
    assert statuses[-1] == 429, statuses
    assert login(None, "wrong-password-x") != 429


def test_gunicorn_trusts_the_same_networks_as_the_dashboard(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [n for n in os.environ if n.startswith("JOBDESK_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("JOBDESK_TRUSTED_PROXIES", "10.1.2.3/8, 192.0.2.7, ::1")
    spec = importlib.util.spec_from_file_location("gunicorn_conf", ROOT / "deploy/gunicorn.conf.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.forwarded_allow_ips == "10.0.0.0/8,192.0.2.7/32,::1/128"
