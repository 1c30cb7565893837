"""One webhook HTTP request to a vetted address, on the event loop: timeouts, no
redirects, capped reads.

The request goes to an address the SSRF guard vetted (a connection to the IP itself),
while the `Host` header and the TLS SNI/certificate check keep the real host name — so
DNS is asked exactly once per delivery and a rebinding answer cannot redirect the
request. Proxies do not exist here, for the same reason. Redirects are never followed (a
3xx is an answer, not a hop). At most `max_bytes` of the response body are read (raw, no
decompression: `Accept-Encoding: identity`), then the connection is dropped.

HTTP/1.1 on asyncio's streams with h11 for the framing: a webhook is one POST and one
answer, and a general-purpose client's layers (cookies, auth and redirect hooks, a
connection pool's bookkeeping, anyio's cancel scopes) cost more CPU per delivery than
the rest of the delivery together.

Connections are kept alive per (scheme, host, port, address) on the event loop that
opened them, one request at a time each: a delivery takes an idle one or opens its own,
and gives it back after a complete exchange (never after a cut-short or broken one).
A TLS connection carries the SNI of the host it was opened for, so it is never shared
between host names. The cache belongs to its loop and is closed with it
(`jobdesk.worker.loop_resources`); every connection shares one TLS context, built once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ssl
import time
import weakref
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

import certifi
import h11

from jobdesk.shared.webhooks.ssrf import VettedTarget
from jobdesk.worker.loop_resources import on_loop_close

MAX_RESPONSE_BYTES = 64 * 1024
#: Endpoints (scheme, host, port, address) whose idle connections are kept.
MAX_ENDPOINTS = 64
#: Idle connections kept per endpoint: one per concurrent request, up to this many (an
#: event loop runs hundreds of deliveries at once).
MAX_IDLE_PER_ENDPOINT = 512
USER_AGENT = "Jobdesk-Webhooks/1"
#: Bytes asked of the socket per read.
READ_SIZE = 64 * 1024


@dataclass(frozen=True)
class HttpResult:
    """What came back. `kind` is `response`, `timeout`, `connect_error` or `unknown`
    (sent, but the answer was lost: the receiver may have applied it)."""

    kind: str
    status_code: int | None = None
    #: The response's headers by lower-case name (repeated ones joined with ", ").
    headers: dict[str, str] | None = None
    body: bytes = b""
    body_truncated: bool = False
    latency_ms: float = 0.0
    error: str | None = None
    address: str | None = None


Key = tuple[str, str, int, str]


def _by_name(fields: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """h11's header list (names already lower-case) as one value per name."""
    headers: dict[str, str] = {}
    for raw_name, raw_value in fields:
        name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return headers


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """Verification against certifi's CA bundle (as httpx and requests verify), built once."""
    return ssl.create_default_context(cafile=certifi.where())


@dataclass(eq=False)
class _Connection:
    """One open HTTP/1.1 connection and its protocol state."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    http: h11.Connection = field(default_factory=lambda: h11.Connection(h11.CLIENT))

    def reusable(self) -> bool:
        """Idle, and the receiver has not closed it meanwhile."""
        return (
            self.http.our_state is h11.IDLE
            and not self.writer.is_closing()
            and not self.reader.at_eof()
        )

    def close(self) -> None:
        self.writer.close()


class _Connections:
    """One event loop's idle connections per endpoint, least recently used endpoint
    first. Only that loop's thread touches it."""

    def __init__(self) -> None:
        self._idle: OrderedDict[Key, list[_Connection]] = OrderedDict()
        #: Moves on at `close_all`: a connection taken before then is not kept.
        self.generation = 0

    def take(self, key: Key) -> _Connection | None:
        idle = self._idle.get(key)
        while idle:
            connection = idle.pop()
            if connection.reusable():
                self._idle.move_to_end(key)
                return connection
            connection.close()
        return None

    def give_back(self, key: Key, connection: _Connection, generation: int) -> None:
        if generation != self.generation or not connection.reusable():
            connection.close()
            return
        idle = self._idle.setdefault(key, [])
        self._idle.move_to_end(key)
        if len(idle) < MAX_IDLE_PER_ENDPOINT:
            idle.append(connection)
        else:
            connection.close()
        while len(self._idle) > MAX_ENDPOINTS:
            _, evicted = self._idle.popitem(last=False)
            for old in evicted:
                old.close()

    async def close_all(self) -> None:
        self.generation += 1
        connections = [c for idle in self._idle.values() for c in idle]
        self._idle.clear()
        for connection in connections:
            connection.close()
        for connection in connections:
            with contextlib.suppress(Exception):
                await connection.writer.wait_closed()


_loop_connections: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Connections] = (
    weakref.WeakKeyDictionary()
)


def _connections() -> _Connections:
    loop = asyncio.get_running_loop()
    cache = _loop_connections.get(loop)
    if cache is None:
        cache = _loop_connections[loop] = _Connections()

        async def close_all() -> None:
            _loop_connections.pop(loop, None)  # a loop that goes on starts afresh
            await cache.close_all()

        on_loop_close(close_all)
    return cache


class _Failed(Exception):
    """An exchange that ended without an answer: its `HttpResult`, and whether the next
    vetted address may be tried (only when nothing was sent)."""

    def __init__(self, result: HttpResult, next_address: bool = False) -> None:
        super().__init__(result.error)
        self.result = result
        self.next_address = next_address


async def post(
    target: VettedTarget,
    headers: dict[str, str],
    body: bytes,
    *,
    connect_timeout: float,
    timeout: float,
    max_bytes: int = MAX_RESPONSE_BYTES,
) -> HttpResult:
    """POST `body` to the first vetted address that accepts a connection."""
    cache = _connections()
    request = _request_headers(target, headers, body)
    failure = HttpResult("connect_error", error="no address to connect to")
    for address in target.addresses:
        key = (target.scheme, target.host, target.port, address)
        generation = cache.generation
        started = time.monotonic()
        connection = cache.take(key)
        kept = False
        try:
            if connection is None:
                connection = await _open(target, address, connect_timeout, started)
            result, kept = await _exchange(
                connection, target, request, body, address, started, timeout, max_bytes
            )
            return result
        except _Failed as failed:
            if not failed.next_address:
                return failed.result
            failure = failed.result
        finally:
            if connection is not None:
                if kept:
                    cache.give_back(key, connection, generation)
                else:
                    connection.close()
    return failure


def _request_headers(
    target: VettedTarget, headers: dict[str, str], body: bytes
) -> list[tuple[str, str]]:
    return [
        ("Host", target.host_header),
        ("User-Agent", USER_AGENT),
        ("Content-Type", "application/json"),
        ("Accept-Encoding", "identity"),
        ("Content-Length", str(len(body))),
        *headers.items(),
    ]


async def _open(
    target: VettedTarget, address: str, connect_timeout: float, started: float
) -> _Connection:
    secure = target.scheme == "https"
    try:
        async with asyncio.timeout(connect_timeout):
            reader, writer = await asyncio.open_connection(
                address,
                target.port,
                ssl=_tls_context() if secure else None,
                server_hostname=target.host if secure else None,
                limit=READ_SIZE,
            )
    except TimeoutError as exc:
        failed = _failure("connect_error", exc, started, address, "connect timed out")
        raise _Failed(failed, True) from None
    except OSError as exc:  # refused, unreachable, TLS handshake or certificate failure
        raise _Failed(_failure("connect_error", exc, started, address), True) from None
    return _Connection(reader, writer)


async def _exchange(
    connection: _Connection,
    target: VettedTarget,
    headers: list[tuple[str, str]],
    body: bytes,
    address: str,
    started: float,
    timeout: float,
    max_bytes: int,
) -> tuple[HttpResult, bool]:
    """Send the POST on `connection` and read the answer; also whether the connection
    may carry the next request. Any failure from here on may have reached the receiver:
    a timeout is a `timeout`, anything else `unknown`."""
    http = connection.http
    try:
        head = http.send(h11.Request(method="POST", target=target.target, headers=headers))
        payload = http.send(h11.Data(data=body)) if body else b""
        end = http.send(h11.EndOfMessage())
        connection.writer.write(b"".join(part or b"" for part in (head, payload, end)))
        async with asyncio.timeout(timeout):
            await connection.writer.drain()
        response = await _response_head(connection, timeout)
    except TimeoutError as exc:
        # `asyncio.timeout` raises a TimeoutError without a message: say what ran out.
        waited = f"no answer within {timeout:g} s"
        raise _Failed(_failure("timeout", exc, started, address, waited)) from None
    except (OSError, h11.ProtocolError, EOFError) as exc:
        raise _Failed(_failure("unknown", exc, started, address)) from None
    answer = _CappedBody(response, started, address, max_bytes, timeout)
    try:
        while not answer.done:
            event = http.next_event()
            if event is h11.NEED_DATA:
                async with asyncio.timeout(timeout):
                    http.receive_data(await connection.reader.read(READ_SIZE))
            elif isinstance(event, h11.Data):
                answer.add(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                answer.done = True
            else:  # ConnectionClosed before the end of the body
                answer.broken(EOFError("connection closed before the end of the body"))
    except (TimeoutError, OSError, h11.ProtocolError) as exc:
        answer.broken(exc)
    # Reused only after a whole exchange that both sides mean to keep alive.
    reusable = not answer.truncated and http.our_state is h11.DONE
    reusable = reusable and http.their_state is h11.DONE
    if reusable:
        http.start_next_cycle()
    return answer.result(), reusable


async def _response_head(connection: _Connection, timeout: float) -> h11.Response:
    http = connection.http
    while True:
        event = http.next_event()
        if event is h11.NEED_DATA:
            async with asyncio.timeout(timeout):
                http.receive_data(await connection.reader.read(READ_SIZE))
        elif isinstance(event, h11.Response):
            return event
        elif isinstance(event, h11.InformationalResponse):
            continue  # 100 Continue and the like: the answer follows
        else:
            raise EOFError("the receiver closed the connection without an answer")


def _failure(
    kind: str, exc: BaseException, started: float, address: str, message: str | None = None
) -> HttpResult:
    detail = message or str(exc) or type(exc).__name__
    return HttpResult(
        kind,
        latency_ms=(time.monotonic() - started) * 1000,
        error=f"{type(exc).__name__}: {detail}",
        address=address,
    )


class _CappedBody:
    """The answer's body, read until `max_bytes` or the request's deadline: the status
    line arrived, so a body cut short or broken does not change the answer."""

    def __init__(
        self, response: h11.Response, started: float, address: str, max_bytes: int, timeout: float
    ) -> None:
        self.response = response
        self.latency_ms = (time.monotonic() - started) * 1000
        self.address = address
        self.max_bytes = max_bytes
        self.deadline = started + timeout
        self.chunks: list[bytes] = []
        self.size = 0
        self.done = False
        self.truncated = False
        self.error: str | None = None

    def add(self, chunk: bytes) -> None:
        self.chunks.append(chunk)
        self.size += len(chunk)
        if self.size > self.max_bytes:
            self.truncated = self.done = True
        elif time.monotonic() > self.deadline:
            self.truncated = self.done = True
            self.error = "response body too slow; stopped reading"

    def broken(self, exc: BaseException) -> None:
        self.truncated = self.done = True
        self.error = f"{type(exc).__name__} while reading the body"

    def result(self) -> HttpResult:
        fields = self.response.headers
        return HttpResult(
            "response",
            status_code=self.response.status_code,
            headers=_by_name(fields),
            body=b"".join(self.chunks)[: self.max_bytes],
            body_truncated=self.truncated,
            latency_ms=self.latency_ms,
            error=self.error,
            address=self.address,
        )
