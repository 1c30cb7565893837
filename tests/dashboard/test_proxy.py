"""Behind a trusted proxy the dashboard sees the real client address."""

import secrets

import sqlalchemy as sa

from jobdesk.dashboard import create_app
from tests.factories import env_settings


def _client(engine: sa.Engine, **extra: str):  # type: ignore[no-untyped-def]
    settings = env_settings(extra, secret_key=secrets.token_urlsafe(48))
    return create_app(settings, engine).test_client()


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
    client = _client(engine, forwarded_allow_ips="10.0.0.1")
    spoofed = client.get(
        "/metrics",
        environ_base={"REMOTE_ADDR": "198.51.100.7"},
        headers={"X-Forwarded-For": "127.0.0.1"},
    )
    assert spoofed.status_code == 403
