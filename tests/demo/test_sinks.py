"""The demo console: the CRM receiver's down/up behaviour, signature checks and
dedupe, the control endpoints' same-origin rule, and an escaped inbox page."""

from __future__ import annotations

import smtplib
from collections.abc import Iterator
from email.message import EmailMessage

import httpx
import pytest

from jobdesk.demo.sinks import Crm, DemoConsole, MailSink
from jobdesk.shared.webhooks.signing import generate_secret, signed_headers


@pytest.fixture
def console() -> Iterator[DemoConsole]:
    sink = MailSink()
    sink.start()
    demo = DemoConsole(Crm(generate_secret(), hold_seconds=0.2), sink, dashboard_url="http://d")
    demo.start()
    yield demo
    demo.stop()
    sink.stop()


def _deliver(
    console: DemoConsole, msg_id: str = "msg_1", secret: str | None = None
) -> httpx.Response:
    body = b'{"type":"user.created","data":{"email":"ana@example.com"}}'
    headers = signed_headers([secret or console.crm.secret], msg_id, body).as_dict()
    return httpx.post(console.crm_webhook_url, content=body, headers=headers, timeout=5)


def test_a_down_crm_holds_then_turns_away(console: DemoConsole) -> None:
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(console.crm_webhook_url, content=b"{}", timeout=0.05)
    answer = _deliver(console)
    assert answer.status_code == 503
    assert console.crm.snapshot()["applied"] == 0


def test_an_up_crm_verifies_and_applies_each_webhook_id_once(console: DemoConsole) -> None:
    assert httpx.post(f"{console.url}/crm/up", timeout=5).json() == {"crm": "up"}
    assert _deliver(console).json() == {"ok": True, "duplicate": False}
    assert _deliver(console).json() == {"ok": True, "duplicate": True}
    assert _deliver(console, secret=generate_secret()).status_code == 401
    state = httpx.get(f"{console.url}/state.json", timeout=5).json()
    assert state["crm"]["applied"] == 1
    assert [d["outcome"] for d in state["crm"]["deliveries"]] == [
        "applied",
        "duplicate (already applied)",
    ]


def test_control_refuses_cross_site_posts(console: DemoConsole) -> None:
    answer = httpx.post(
        f"{console.url}/crm/up", headers={"Origin": "http://evil.example"}, timeout=5
    )
    assert answer.status_code == 403
    assert not console.crm.up
    same_site = httpx.post(
        f"{console.url}/crm/up",
        headers={"Origin": console.url, "Accept": "text/html"},
        timeout=5,
    )
    assert same_site.status_code == 303
    assert console.crm.up
    assert httpx.post(f"{console.url}/crm/down", timeout=5).json() == {"crm": "down"}


def test_the_inbox_page_escapes_what_it_shows(console: DemoConsole) -> None:
    message = EmailMessage()
    message["From"] = "app@example.com"
    message["To"] = "ana@example.com"
    message["Subject"] = "<script>alert(1)</script>"
    message.set_content("hello")
    with smtplib.SMTP("127.0.0.1", console.sink.port, timeout=5) as smtp:
        smtp.send_message(message)
    page = httpx.get(console.url + "/", timeout=5).text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script>" not in page
    assert "Bring the CRM back" in page
    assert httpx.get(f"{console.url}/nope", timeout=5).status_code == 404
