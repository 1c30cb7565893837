"""The webhook HTTP client's connections: kept alive between deliveries to an endpoint,
never shared by two requests at once, one set per event loop, closed with the loop."""

from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from jobdesk.shared.webhooks.ssrf import VettedTarget
from jobdesk.worker.jobs import webhook_http
from jobdesk.worker.jobs.webhook_http import post
from jobdesk.worker.loop_resources import close_loop_resources
from tests.asyncdb import on_one_loop


class PortsServer:
    """Answers 200 to every POST and records the client port and Host of each request;
    with a barrier, holds every request until that many are in flight together.
    `close_after_answer` says `Connection: close` and closes; `drop_idle()` closes the
    idle keep-alive connections without a word."""

    def __init__(self, *, close_after_answer: bool = False) -> None:
        self.ports: list[int] = []
        self.hosts: list[str] = []
        self.server_names: list[str | None] = []
        self.barrier: threading.Barrier | None = None
        self.idle: list[Any] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                server.ports.append(self.client_address[1])
                server.hosts.append(self.headers["Host"])
                if server.barrier is not None:
                    server.barrier.wait(timeout=5)
                if not close_after_answer:
                    server.idle.append(self.connection)  # before the client can go on
                self.send_response(200)
                self.send_header("Content-Length", "2")
                if close_after_answer:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                self.end_headers()
                self.wfile.write(b"ok")

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        self.port = self.http.server_address[1]
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def drop_idle(self) -> None:
        for connection in self.idle:
            connection.shutdown(socket.SHUT_RDWR)
        self.idle.clear()

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


def test_a_receiver_that_closes_after_answering_gets_a_fresh_connection_next_time() -> None:
    closing = PortsServer(close_after_answer=True)
    try:

        async def scenario() -> None:
            for _ in range(3):
                result = await send(closing)
                assert (result.status_code, result.body, result.body_truncated) == (
                    200,
                    b"ok",
                    False,
                )

        on_one_loop(scenario)
        assert len(set(closing.ports)) == 3
    finally:
        closing.http.shutdown()
        closing.http.server_close()


def test_an_idle_connection_the_receiver_dropped_is_not_reused(server: PortsServer) -> None:
    async def scenario() -> None:
        assert (await send(server)).status_code == 200
        server.drop_idle()
        await asyncio.sleep(0.2)  # the FIN arrives while the connection is idle
        result = await send(server)
        assert (result.kind, result.status_code) == ("response", 200), result

    on_one_loop(scenario)
    assert len(set(server.ports)) == 2


# ------------------------------------------------------------------------------ TLS
@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for `hooks.test` (openssl, as a CA would issue it)."""
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=hooks.test",
         "-addext", "subjectAltName=DNS:hooks.test"],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.fixture
def tls_server(
    certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> Iterator[PortsServer]:
    cert, key = certificate
    running = PortsServer()
    server_side = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_side.load_cert_chain(cert, key)

    def remember_sni(_sock: ssl.SSLObject, name: str | None, _ctx: ssl.SSLContext) -> None:
        running.server_names.append(name)

    server_side.sni_callback = remember_sni  # type: ignore[assignment]
    running.http.socket = server_side.wrap_socket(running.http.socket, server_side=True)
    # The suite's CA in place of the public ones: the receiver's certificate is ours.
    trusted = ssl.create_default_context(cafile=str(cert))
    monkeypatch.setattr(webhook_http, "_tls_context", lambda: trusted)
    yield running
    running.http.shutdown()
    running.http.server_close()


def tls_target(server: PortsServer, host: str) -> VettedTarget:
    url = f"https://{host}:{server.port}/hook"
    return VettedTarget(url, "https", host, server.port, "/hook", ("127.0.0.1",))


def test_tls_goes_to_the_vetted_address_with_the_real_host_name(tls_server: PortsServer) -> None:
    async def scenario() -> webhook_http.HttpResult:
        target = tls_target(tls_server, "hooks.test")
        return await post(target, {}, b"{}", connect_timeout=2, timeout=5)

    result = on_one_loop(scenario)
    assert (result.kind, result.status_code, result.address) == ("response", 200, "127.0.0.1")
    # SNI and Host name the endpoint's host, though the connection went to the address.
    assert tls_server.server_names == ["hooks.test"]
    assert tls_server.hosts == [f"hooks.test:{tls_server.port}"]


def test_tls_refuses_a_certificate_for_another_host(tls_server: PortsServer) -> None:
    async def scenario() -> webhook_http.HttpResult:
        target = tls_target(tls_server, "elsewhere.test")
        return await post(target, {}, b"{}", connect_timeout=2, timeout=5)

    result = on_one_loop(scenario)
    assert result.kind == "connect_error"  # nothing was sent
    assert "certificate" in (result.error or "").lower()
    assert tls_server.hosts == []
