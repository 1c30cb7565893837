"""The webhook HTTP client's connections: kept alive between deliveries to an endpoint,
never shared by two requests at once, one set per event loop, closed with the loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from jobdesk.shared.webhooks.ssrf import VettedTarget
from jobdesk.worker.jobs import webhook_http
from jobdesk.worker.jobs.webhook_http import post
from jobdesk.worker.loop_resources import close_loop_resources
from tests.asyncdb import on_one_loop


class PortsServer:
    """Answers 200 to every POST and records the client port each request came from;
    with a barrier, holds every request until that many are in flight together."""

    def __init__(self) -> None:
        self.ports: list[int] = []
        self.barrier: threading.Barrier | None = None
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                server.ports.append(self.client_address[1])
                if server.barrier is not None:
                    server.barrier.wait(timeout=5)
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        self.port = self.http.server_address[1]
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def target(self) -> VettedTarget:
        url = f"http://127.0.0.1:{self.port}/hook"
        return VettedTarget(url, "http", "127.0.0.1", self.port, "/hook", ("127.0.0.1",))


@pytest.fixture
def server() -> Iterator[PortsServer]:
    running = PortsServer()
    yield running
    running.http.shutdown()
    running.http.server_close()


async def send(server: PortsServer) -> webhook_http.HttpResult:
    return await post(server.target(), {}, b"{}", connect_timeout=2, timeout=5)


def test_deliveries_one_after_another_share_one_connection(server: PortsServer) -> None:
    async def scenario() -> None:
        results = [await send(server) for _ in range(5)]
        assert [r.status_code for r in results] == [200] * 5

    on_one_loop(scenario)
    assert len(set(server.ports)) == 1


def test_concurrent_deliveries_each_have_a_connection_and_keep_it(server: PortsServer) -> None:
    async def scenario() -> None:
        # All eight are answered only once all eight are in flight: none waits for another.
        server.barrier = threading.Barrier(8)
        first = await asyncio.gather(*(send(server) for _ in range(8)))
        server.barrier = None
        assert [r.status_code for r in first] == [200] * 8
        assert len(set(server.ports)) == 8
        # The next round reuses those connections instead of opening new ones.
        await asyncio.gather(*(send(server) for _ in range(8)))
        assert len(set(server.ports)) == 8

    on_one_loop(scenario)


def test_each_event_loop_has_its_own_clients(server: PortsServer) -> None:
    # A client's connections belong to the loop that opened them: a second loop (a
    # replaced worker loop, the next `drain()` attempt) opens its own.
    async def scenario() -> None:
        assert (await send(server)).status_code == 200

    on_one_loop(scenario)
    on_one_loop(scenario)
    assert len(set(server.ports)) == 2


def test_a_request_in_flight_when_the_loop_closes_does_not_keep_its_client(
    server: PortsServer,
) -> None:
    async def scenario() -> None:
        await send(server)
        server.barrier = threading.Barrier(2)
        late = asyncio.ensure_future(send(server))
        # The request is held by the server: close the loop's clients meanwhile.
        while len(server.ports) < 2:
            await asyncio.sleep(0.01)
        await close_loop_resources()
        await asyncio.to_thread(server.barrier.wait, 5)
        assert (await late).status_code == 200
        server.barrier = None
        await send(server)

    on_one_loop(scenario)
    assert len(set(server.ports)) == 2  # the first connection was closed; a new one
    assert len(server.ports) == 3
