"""A real SMTP server for tests (aiosmtpd) whose answers the test chooses.

Modes: `ok` (250), `451` (temporary failure at DATA), `550` (mailbox unavailable at
RCPT), `drop` (250 for DATA, then the connection is closed before QUIT). Every mail
the server accepted is kept with its Message-ID. `HangingServer` accepts connections
and never says hello (E4: "SMTP hangs at greeting").
"""

from __future__ import annotations

import asyncio
import socket
import threading
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from typing import Any

from aiosmtpd.controller import Controller


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Received:
    sender: str
    recipients: list[str]
    message: Message

    @property
    def message_id(self) -> str:
        return str(self.message["Message-ID"])


@dataclass
class _Handler:
    mode: str = "ok"
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    on_data: list[Any] = field(default_factory=list)
    """Callables run once (each) after a mail is stored, before the 250 (fault hook)."""
    delay_seconds: float = 0.0
    """How long DATA takes before the mail is stored (a slow server widens races)."""

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, rcpt_options: Any
    ) -> str:
        if self.mode == "550":
            return f"550 5.1.1 <{address}>: Recipient address rejected: User unknown"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        if self.mode == "451":
            return "451 4.3.0 Temporary local problem, try again later"
        if self.delay_seconds:
            await asyncio.sleep(self.delay_seconds)
        with self.lock:
            self.received.append(
                Received(
                    envelope.mail_from,
                    list(envelope.rcpt_tos),
                    message_from_bytes(envelope.original_content or envelope.content),
                )
            )
        if self.on_data:
            self.on_data.pop(0)()
        if self.mode == "drop":
            # The reply is written first; closing flushes it, then the peer sees EOF.
            asyncio.get_running_loop().call_soon(server.transport.close)
        return "250 2.0.0 Ok: queued as ABC123"


class SmtpSink:
    def __init__(self) -> None:
        self.handler = _Handler()
        self.port = free_port()
        self.controller = Controller(self.handler, hostname="127.0.0.1", port=self.port)

    @property
    def url(self) -> str:
        return f"smtp://127.0.0.1:{self.port}"

    @property
    def received(self) -> list[Received]:
        with self.handler.lock:
            return list(self.handler.received)

    def set_mode(self, mode: str) -> None:
        assert mode in ("ok", "451", "550", "drop")
        self.handler.mode = mode

    def start(self) -> SmtpSink:
        self.controller.start()
        return self

    def stop(self) -> None:
        self.controller.stop()


class HangingServer:
    """Accepts TCP connections and never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = int(self.sock.getsockname()[1])
        self.clients: list[socket.socket] = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        self.sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                client, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.clients.append(client)

    def start(self) -> HangingServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(2)
        for client in self.clients:
            client.close()
        self.sock.close()
