"""A real webhook receiver for tests: a threaded HTTP server that verifies Standard
Webhooks signatures, applies each `webhook-id` once, and answers per path:

| path | answer |
|---|---|
| `/ok` | 200 |
| `/500` | 500 |
| `/503` | 503 with `Retry-After: 7` |
| `/429` | 429 |
| `/410` | 410 Gone |
| `/301` | 301 to another URL (must not be followed) |
| `/400` | 400 with a body |
| `/hostile` | 400 with 64 KiB that once made masking backtrack (`HOSTILE_BODY`) |
| `/big` | 200 with a 10 MB body |
| `/reset` | applies the event, then resets the connection (first time per id), later 200 |
| `/slow` | sleeps 3 s, then 200 |
| `/hook` | 200 after `delay_seconds` (0 unless a test sets it) |

A request with a bad signature is answered 401 and not applied.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from jobdesk.shared.webhooks.signing import WebhookVerificationError, verify
from tests.local_http import LocalPostServer

BIG_BODY = b"x" * (10 * 1024 * 1024)
#: Issue 23: masking this response body held the worker's GIL for ~23 s.
HOSTILE_BODY = (" " + "secret" * 10900).encode()


@dataclass
class Seen:
    path: str
    webhook_id: str
    timestamp: str
    signature: str
    verified: bool
    body: bytes
    host: str = ""
    traceparent: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    """Every request header, names lower-cased."""


class Receiver(LocalPostServer):
    def __init__(self) -> None:
        self.secrets: list[str] = []
        self.seen: list[Seen] = []
        self.applied: Counter[str] = Counter()
        self.deliveries: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.on_apply: dict[str, Any] = {}
        """path → callable run once the event is applied, before answering (fault hook)."""
        self.delay_seconds = 0.0
        """How long `/hook` takes to answer (a delivery still in flight)."""
        super().__init__()

    def ids_seen(self, path: str | None = None) -> list[str]:
        with self.lock:
            return [s.webhook_id for s in self.seen if path is None or s.path == path]

    def _verify(self, headers: dict[str, str], body: bytes) -> bool:
        for secret in self.secrets:
            try:
                verify(secret, headers, body)
            except WebhookVerificationError:
                continue
            return True
        return False

    def _handle(self, request: BaseHTTPRequestHandler) -> None:
        length = int(request.headers.get("Content-Length", "0"))
        body = request.rfile.read(length)
        headers = {k.lower(): v for k, v in request.headers.items()}
        msg_id = headers.get("webhook-id", "")
        verified = self._verify(headers, body)
        path = request.path.split("?", 1)[0]
        with self.lock:
            self.seen.append(
                Seen(
                    path,
                    msg_id,
                    headers.get("webhook-timestamp", ""),
                    headers.get("webhook-signature", ""),
                    verified,
                    body,
                    headers.get("host", ""),
                    headers.get("traceparent", ""),
                    headers,
                )
            )
            self.deliveries[msg_id] += 1
            first_time = self.deliveries[msg_id] == 1
        if not verified:
            self._reply(request, 401, b"bad signature")
            return
        if path in ("/ok", "/reset", "/slow", "/big", "/hook"):
            with self.lock:
                # An idempotent receiver: the webhook-id is applied once, repeats are acks.
                self.applied.setdefault(msg_id, 1)
            hook = self.on_apply.pop(path, None)
            if hook is not None:
                hook()
        if path == "/reset" and first_time:
            # Applied above; now lose the answer: RST instead of a response (E3).
            request.connection.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
            )
            request.connection.close()
            request.close_connection = True
            return
        if path == "/slow":
            time.sleep(3)
        if path == "/hook" and self.delay_seconds:
            time.sleep(self.delay_seconds)
        answers: dict[str, tuple[int, bytes, dict[str, str]]] = {
            "/ok": (200, b"ok", {}),
            "/hook": (200, b"ok", {}),
            "/reset": (200, b"ok (duplicate)", {}),
            "/slow": (200, b"late", {}),
            "/500": (500, b"internal error", {}),
            "/503": (503, b"busy", {"Retry-After": "7"}),
            "/429": (429, b"slow down", {}),
            "/410": (410, b"gone", {}),
            "/301": (301, b"", {"Location": "http://127.0.0.1:1/elsewhere"}),
            "/400": (400, b'{"error": "field user_id missing", "token=abc123secret": 1}', {}),
            "/big": (200, BIG_BODY, {}),
            "/hostile": (400, HOSTILE_BODY, {}),
        }
        status, payload, extra = answers.get(path, (404, b"no such path", {}))
        self._reply(request, status, payload, extra)
