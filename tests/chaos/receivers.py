"""The outside world of the chaos run: a webhook receiver and an SMTP sink that count.

`WebhookReceiver` (threaded HTTP) verifies every Standard Webhooks signature with
`jobdesk.shared.webhooks.signing.verify`, applies each `webhook-id` once (a repeat is a caught
duplicate, acknowledged but not applied again) and remembers which logical event — the
`key` in the body's `data` — each id belongs to. The driver switches its mode:

| mode | `/hook` answers |
|---|---|
| `ok` | applies, 200 |
| `slow` | applies, waits 0.5-2 s (past the worker's 1 s timeout), then 200 |
| `failing` | 500 or 503 + `Retry-After: 1`, nothing applied |
| `resetting` | applies, then resets the connection (the sender cannot know it landed) |

`/reject` always answers 400 (planted dead letters).

`SmtpSink` (aiosmtpd) keeps every accepted mail's `Message-ID` per logical key (the
`key=` line of the chaos template); its modes are `ok`, `tempfail` (451 at DATA) and
`drop` (250, then the connection is closed before QUIT).
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import socket
import struct
import threading
import time
from collections import Counter, defaultdict
from email import message_from_bytes
from http.server import BaseHTTPRequestHandler
from typing import Any

from aiosmtpd.controller import Controller

from jobdesk.shared.webhooks.signing import WebhookVerificationError, verify
from tests.chaos.pgserver import free_port
from tests.local_http import LocalPostServer

WEBHOOK_MODES = ("ok", "slow", "failing", "resetting")


SMTP_MODES = ("ok", "tempfail", "drop")


class WebhookReceiver(LocalPostServer):
    def __init__(self, rng: random.Random, host: str = "127.0.0.1") -> None:
        self.secrets: list[str] = []
        self.mode = "ok"
        self._rng = rng
        self.lock = threading.Lock()
        self.deliveries: Counter[str] = Counter()  # webhook-id -> requests received
        self.applied: dict[str, str] = {}  # webhook-id -> logical key, first application
        self.keys_applied: defaultdict[str, set[str]] = defaultdict(set)  # key -> ids
        self.repeats: Counter[str] = Counter()  # webhook-id -> caught duplicates
        self.bad_signatures: Counter[str] = Counter()  # reason -> count
        self.aborted = 0
        self.rejected = 0
        self.answers: Counter[str] = Counter()
        super().__init__(host)

    def set_mode(self, mode: str) -> None:
        assert mode in WEBHOOK_MODES, mode
        self.mode = mode

    def _verified(self, headers: dict[str, str], body: bytes) -> bool:
        errors = []
        for secret in self.secrets:
            try:
                verify(secret, headers, body)
            except WebhookVerificationError as exc:
                errors.append(str(exc))
                continue
            return True
        with self.lock:
            self.bad_signatures[errors[0] if errors else "no secret"] += 1
        return False

    def _apply(self, msg_id: str, body: bytes) -> None:
        try:
            key = str(json.loads(body)["data"]["key"])
        except (ValueError, KeyError, TypeError):
            key = "?"
        with self.lock:
            if msg_id in self.applied:
                self.repeats[msg_id] += 1  # a repeat: acknowledged, not applied again
            else:
                self.applied[msg_id] = key
                self.keys_applied[key].add(msg_id)

    def _handle(self, request: BaseHTTPRequestHandler) -> None:
        length = int(request.headers.get("Content-Length", "0"))
        body = request.rfile.read(length)
        headers = {k.lower(): v for k, v in request.headers.items()}
        msg_id = headers.get("webhook-id", "")
        mode = self.mode
        with self.lock:
            self.deliveries[msg_id] += 1
            if len(body) < length:
                # The sender died mid-request (a SIGKILLed worker): nothing to answer.
                self.aborted += 1
                return
        if not self._verified(headers, body):
            self._reply(request, 401, b"bad signature")
            return
        if request.path == "/reject":
            with self.lock:
                self.rejected += 1
            self._reply(request, 400, b'{"error": "rejected by the chaos receiver"}')
            return
        with self.lock:
            self.answers[mode] += 1
        if mode == "failing":
            if self._rng.random() < 0.5:
                self._reply(request, 503, b"busy", {"Retry-After": "1"})
            else:
                self._reply(request, 500, b"internal error")
            return
        self._apply(msg_id, body)
        if mode == "resetting":
            request.connection.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
            )
            request.connection.close()
            request.close_connection = True
            return
        if mode == "slow":
            time.sleep(self._rng.uniform(0.5, 2.0))
        self._reply(request, 200, b"ok")


_KEY_LINE = re.compile(rb"key=(\S+)")


class _SmtpHandler:
    def __init__(self) -> None:
        self.mode = "ok"
        self.lock = threading.Lock()
        self.by_key: defaultdict[str, set[str]] = defaultdict(set)  # key -> Message-IDs
        self.accepted: Counter[str] = Counter()  # Message-ID -> times accepted
        self.tempfailed = 0

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        if self.mode == "tempfail":
            with self.lock:
                self.tempfailed += 1
            return "451 4.3.0 chaos: try again later"
        raw = envelope.original_content or envelope.content
        message = message_from_bytes(raw)
        msg_id = str(message["Message-ID"])
        payload = message.get_payload(decode=True) if not message.is_multipart() else raw
        found = _KEY_LINE.search(payload if isinstance(payload, bytes) else raw)
        key = found.group(1).decode() if found else "?"
        with self.lock:
            self.by_key[key].add(msg_id)
            self.accepted[msg_id] += 1
        if self.mode == "drop":
            # The 250 is written first; closing then flushes it and the client sees EOF.
            asyncio.get_running_loop().call_soon(server.transport.close)
        return "250 2.0.0 Ok: queued"


class SmtpSink:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self.handler = _SmtpHandler()
        self.host = host
        self.port = free_port()
        self.controller = Controller(self.handler, hostname=host, port=self.port)

    @property
    def url(self) -> str:
        return f"smtp://{self.host}:{self.port}"

    def set_mode(self, mode: str) -> None:
        assert mode in SMTP_MODES, mode
        self.handler.mode = mode

    def start(self) -> SmtpSink:
        self.controller.start()
        return self

    def stop(self) -> None:
        self.controller.stop()
