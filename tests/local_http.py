"""A threaded HTTP server on 127.0.0.1 (or another local address: a chaos run's bridge)
for test receivers (webhooks, fault injection).

Subclasses implement `_handle(request_handler)` for POSTs; this class owns the socket,
the serving thread and start/stop, so every receiver starts and stops the same way.
"""

from __future__ import annotations

import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


class QuietThreadingServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client killed mid-request resets its connection: expected in these tests.
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class LocalPostServer:
    """Serves POST requests on a free loopback port by calling `self._handle(handler)`."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        receiver = self
        self.host = host

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                receiver._handle(self)

        self.server = QuietThreadingServer((host, 0), Handler)
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def _handle(self, request: BaseHTTPRequestHandler) -> None:
        raise NotImplementedError

    @staticmethod
    def _reply(
        request: BaseHTTPRequestHandler,
        status: int,
        body: bytes,
        headers: dict[str, str] | None = None,
    ) -> None:
        try:
            request.send_response(status)
            for name, value in (headers or {}).items():
                request.send_header(name, value)
            request.send_header("Content-Length", str(len(body)))
            request.end_headers()
            request.wfile.write(body)
        except OSError:
            pass  # the client stopped reading or gave up waiting: expected in these tests

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.port}{path}"

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
