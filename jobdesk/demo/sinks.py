"""The demo's stand-ins for the outside world: an SMTP sink and a "CRM".

- `MailSink` — a real SMTP server (aiosmtpd) on 127.0.0.1 that accepts every mail and
  keeps it, so the demo can show each welcome email arriving exactly once.
- `DemoConsole` — a small HTTP server on 127.0.0.1 that is both the CRM's webhook
  receiver (`POST /crm/webhooks`) and the page a person watches (`GET /`: the inbox,
  the CRM's state and a button to bring it back; `GET /state.json` for scripts).

The CRM starts *down*: a delivery is accepted and then left unanswered, so the worker
sees the timeouts the story describes. `POST /crm/up` brings it back (the page's
button; also usable with `curl -X POST`), after which it verifies each request's
Standard Webhooks signature and applies each `webhook-id` once.
"""

from __future__ import annotations

import contextlib
import html
import json
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email import message_from_bytes
from email.policy import default as default_policy
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from aiosmtpd.controller import Controller

from jobdesk.shared.webhooks.signing import WebhookVerificationError, verify

MAX_BODY_BYTES = 256 * 1024
#: How long a request to the CRM is held while it is down; longer than the demo's
#: webhook timeout, so the worker gives up first (a timeout, as in the story).
DOWN_HOLD_SECONDS = 5.0
MAX_KEPT = 500


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could listen on `port` now.

    SO_REUSEADDR as every server sets it: connections a stopped server closed linger in
    TIME_WAIT for a minute and do not keep the port from a new listener.
    """
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _now() -> str:
    return datetime.now(UTC).strftime("%H:%M:%S")


# --- SMTP --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mail:
    sender: str
    recipients: tuple[str, ...]
    subject: str
    message_id: str
    received_at: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "from": self.sender,
            "to": list(self.recipients),
            "subject": self.subject,
            "message_id": self.message_id,
            "received_at": self.received_at,
        }


@dataclass
class _MailHandler:
    mails: list[Mail] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    on_mail: Callable[[Mail], None] | None = None

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        del server, session
        message = message_from_bytes(
            envelope.original_content or envelope.content, policy=default_policy
        )
        mail = Mail(
            sender=str(envelope.mail_from),
            recipients=tuple(str(r) for r in envelope.rcpt_tos),
            subject=str(message.get("Subject", "")),
            message_id=str(message.get("Message-ID", "")),
            received_at=_now(),
        )
        with self.lock:
            self.mails.append(mail)
            del self.mails[:-MAX_KEPT]
        if self.on_mail is not None:
            self.on_mail(mail)
        return "250 2.0.0 Ok: kept by the Jobdesk demo sink"


class MailSink:
    """An SMTP server on 127.0.0.1:`port` that keeps what it receives."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self._handler = _MailHandler()
        self._controller = Controller(self._handler, hostname="127.0.0.1", port=self.port)

    @property
    def url(self) -> str:
        return f"smtp://127.0.0.1:{self.port}"

    def set_listener(self, fn: Callable[[Mail], None] | None) -> None:
        self._handler.on_mail = fn

    def mails(self) -> list[Mail]:
        with self._handler.lock:
            return list(self._handler.mails)

    def start(self) -> None:
        self._controller.start()

    def stop(self) -> None:
        self._controller.stop()


# --- the CRM and the console page --------------------------------------------------------


@dataclass(frozen=True)
class CrmDelivery:
    webhook_id: str
    event: str
    user: str
    outcome: str
    at: str

    def as_dict(self) -> dict[str, str]:
        return {
            "webhook_id": self.webhook_id,
            "event": self.event,
            "user": self.user,
            "outcome": self.outcome,
            "at": self.at,
        }


class Crm:
    """The CRM's state: up or down, what it applied, what it turned away."""

    def __init__(self, secret: str = "", *, hold_seconds: float = DOWN_HOLD_SECONDS) -> None:
        self.secret = secret
        self.hold_seconds = hold_seconds
        self._up = threading.Event()
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._applied: set[str] = set()
        self.deliveries: list[CrmDelivery] = []
        self.turned_away = 0

    @property
    def up(self) -> bool:
        return self._up.is_set()

    def set_up(self, up: bool) -> None:
        if up:
            self._up.set()
        else:
            self._up.clear()

    def stop(self) -> None:
        self._stopping.set()

    def hold_while_down(self) -> None:
        """Called for a request that arrived while down: wait (the caller times out).
        It is turned away even if the CRM comes back meanwhile — a down service does
        not apply what reached it while down."""
        self._stopping.wait(self.hold_seconds)
        with self._lock:
            self.turned_away += 1

    def receive(self, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, Any]]:
        """Verify and apply one delivery (each webhook-id once)."""
        try:
            msg_id = verify(self.secret, headers, body)
        except WebhookVerificationError as exc:
            return HTTPStatus.UNAUTHORIZED, {"error": f"signature: {exc}"}
        try:
            document = json.loads(body)
        except ValueError:
            return HTTPStatus.BAD_REQUEST, {"error": "body is not JSON"}
        data = document.get("data") if isinstance(document, dict) else None
        user = str(data.get("email", "")) if isinstance(data, dict) else ""
        event = str(document.get("type", "")) if isinstance(document, dict) else ""
        with self._lock:
            duplicate = msg_id in self._applied
            self._applied.add(msg_id)
            outcome = "duplicate (already applied)" if duplicate else "applied"
            self.deliveries.append(CrmDelivery(msg_id, event, user, outcome, _now()))
            del self.deliveries[:-MAX_KEPT]
        return HTTPStatus.OK, {"ok": True, "duplicate": duplicate}

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "up": self.up,
                "applied": len(self._applied),
                "turned_away": self.turned_away,
                "deliveries": [d.as_dict() for d in self.deliveries],
            }


class DemoConsole:
    """HTTP on 127.0.0.1:`port`: the CRM receiver plus the page a person watches."""

    def __init__(
        self,
        crm: Crm,
        sink: MailSink,
        *,
        port: int | None = None,
        dashboard_url: str = "",
    ) -> None:
        self.crm = crm
        self.sink = sink
        self.dashboard_url = dashboard_url
        self.on_crm_change: Callable[[bool], None] | None = None
        #: Extra data for `/state.json` (the demo puts the story's progress there).
        self.status_provider: Callable[[], dict[str, Any]] | None = None
        handler = _handler_class(self)
        self._server = ThreadingHTTPServer(("127.0.0.1", port or 0), handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="demo-console", daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def crm_webhook_url(self) -> str:
        return f"{self.url}/crm/webhooks"

    def set_crm(self, up: bool) -> None:
        changed = self.crm.up != up
        self.crm.set_up(up)
        if changed and self.on_crm_change is not None:
            self.on_crm_change(up)

    def state(self) -> dict[str, Any]:
        return {
            "crm": self.crm.snapshot(),
            "mail": [m.as_dict() for m in self.sink.mails()],
            "dashboard_url": self.dashboard_url,
            "story": self.status_provider() if self.status_provider else None,
        }

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.crm.stop()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def page(self) -> str:
        state = self.state()
        crm = state["crm"]
        esc = html.escape
        mails = "".join(
            f"<tr><td>{esc(m['received_at'])}</td><td>{esc(', '.join(m['to']))}</td>"
            f"<td>{esc(m['subject'])}</td><td><code>{esc(m['message_id'])}</code></td></tr>"
            for m in reversed(state["mail"])
        )
        deliveries = "".join(
            f"<tr><td>{esc(d['at'])}</td><td>{esc(d['event'])}</td><td>{esc(d['user'])}</td>"
            f"<td><code>{esc(d['webhook_id'])}</code></td><td>{esc(d['outcome'])}</td></tr>"
            for d in reversed(crm["deliveries"])
        )
        if crm["up"]:
            status = '<strong class="up">UP</strong> — deliveries are verified and applied'
            button = '<form method="post" action="/crm/down"><button>Take the CRM down</button>'
        else:
            status = (
                '<strong class="down">DOWN</strong> — requests time out '
                f"({crm['turned_away']} turned away so far)"
            )
            button = '<form method="post" action="/crm/up"><button>Bring the CRM back</button>'
        dashboard = (
            f'<p>Dashboard: <a href="{esc(self.dashboard_url)}">{esc(self.dashboard_url)}</a></p>'
            if self.dashboard_url
            else ""
        )
        return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Jobdesk demo console</title>
<meta http-equiv="refresh" content="3">
<style>
body {{ font: 15px/1.4 system-ui, sans-serif; margin: 2rem; max-width: 70rem; }}
table {{ border-collapse: collapse; width: 100%; margin-bottom: 2rem; }}
td, th {{ border-bottom: 1px solid #ddd; padding: .3rem .5rem; text-align: left; }}
.up {{ color: #137333; }} .down {{ color: #b3261e; }}
button {{ font-size: 1rem; padding: .4rem 1rem; }}
</style></head><body>
<h1>Jobdesk demo console</h1>
{dashboard}
<h2>CRM (webhook endpoint <code>crm</code>)</h2>
<p>{status}</p>
{button}</form>
<p>{crm["applied"]} event(s) applied.</p>
<table><tr><th>at (UTC)</th><th>event</th><th>user</th><th>webhook-id</th><th>outcome</th></tr>
{deliveries}</table>
<h2>Inbox (SMTP sink, {len(state["mail"])} mail(s))</h2>
<table><tr><th>at (UTC)</th><th>to</th><th>subject</th><th>Message-ID</th></tr>
{mails}</table>
</body></html>"""


def _handler_class(console: DemoConsole) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "JobdeskDemo/1"

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the demo prints its own story."""

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, data: Any) -> None:
            self._send(status, json.dumps(data).encode(), "application/json")

        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            if path == "/":
                self._send(200, console.page().encode(), "text/html; charset=utf-8")
            elif path == "/state.json":
                self._json(200, console.state())
            else:
                self._json(404, {"error": "not found"})

        def _cross_site(self) -> bool:
            # Only the console's own page (or a script without an Origin) may flip the CRM.
            origin = self.headers.get("Origin")
            return origin is not None and urlsplit(origin).netloc != self.headers.get("Host")

        def do_POST(self) -> None:
            path = urlsplit(self.path).path
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                self._json(413, {"error": "body too large"})
                return
            body = self.rfile.read(length) if length else b""
            if path == "/crm/webhooks":
                self._webhook(body)
            elif path in ("/crm/up", "/crm/down"):
                if self._cross_site():
                    self._json(403, {"error": "cross-site request refused"})
                    return
                console.set_crm(path == "/crm/up")
                if "text/html" in (self.headers.get("Accept") or ""):
                    self.send_response(303)
                    self.send_header("Location", "/")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                else:
                    self._json(200, {"crm": "up" if console.crm.up else "down"})
            else:
                self._json(404, {"error": "not found"})

        def _webhook(self, body: bytes) -> None:
            if not console.crm.up:
                console.crm.hold_while_down()
                # The worker gave up waiting long ago (that was the point): it may be gone.
                with contextlib.suppress(OSError):
                    self._json(503, {"error": "CRM unavailable"})
                return
            headers = {key.lower(): value for key, value in self.headers.items()}
            status, answer = console.crm.receive(headers, body)
            self._json(status, answer)

    return Handler
