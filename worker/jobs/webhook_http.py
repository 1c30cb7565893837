"""One webhook HTTP request to a vetted address, on the event loop: timeouts, no
redirects, capped reads.

The request goes to an address the SSRF guard vetted (the URL's host is replaced by
the IP), while the `Host` header and the TLS SNI/certificate check keep the real host
name — so DNS is asked exactly once per delivery and a rebinding answer cannot redirect
the request. Proxies from the environment are ignored for the same reason. Redirects are
never followed (a 3xx is an answer, not a hop). At most `max_bytes` of the response
body are read (raw, no decompression), then the connection is dropped.

Clients are kept per (scheme, host, port, timeouts) so keep-alive works across
deliveries to the same endpoint; a client is never shared between host names, because
a pooled TLS connection carries the SNI of the host it was opened for. Each request
checks a client out for itself and returns it afterwards, so concurrent deliveries never
wait on one another's connection pool. Clients belong to the event loop that opened
them: one cache per loop, closed with the loop (`jobdesk.worker.loop_resources`). Every
client shares one TLS context, built once (one per client cost ~17 ms of CPU).
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass

import certifi
import httpx

from jobdesk.shared.webhooks.ssrf import VettedTarget
from jobdesk.worker.loop_resources import on_loop_close

MAX_RESPONSE_BYTES = 64 * 1024
#: Endpoints (scheme, host, port, timeouts) whose idle clients are kept.
MAX_CLIENTS = 64
#: Idle clients kept per endpoint: one per concurrent request, up to this many (an
#: event loop runs hundreds of deliveries at once).
MAX_IDLE_PER_KEY = 512
USER_AGENT = "Jobdesk-Webhooks/1"


@dataclass(frozen=True)
class HttpResult:
    """What came back. `kind` is `response`, `timeout`, `connect_error` or `unknown`
    (sent, but the answer was lost: the receiver may have applied it)."""

    kind: str
    status_code: int | None = None
    headers: httpx.Headers | None = None
    body: bytes = b""
    body_truncated: bool = False
    latency_ms: float = 0.0
    error: str | None = None
    address: str | None = None


Key = tuple[object, ...]


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """httpx's default verification (certifi's CA bundle), built once for every client."""
    return ssl.create_default_context(cafile=certifi.where())


#: One request at a time per client, so its pool holds one keep-alive connection (a
#: second for a fallback address). A client shared by every request made them queue on
#: its pool, and each request scanned all its idle connections.
_ONE_AT_A_TIME = httpx.Limits(max_connections=2, max_keepalive_connections=1)


def _new_client(connect_timeout: float, timeout: float) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        timeout=httpx.Timeout(connect=connect_timeout, read=timeout, write=timeout, pool=timeout),
        follow_redirects=False,
        trust_env=False,
        verify=_tls_context(),
        limits=_ONE_AT_A_TIME,
    )


class _ClientCache:
    """One event loop's idle clients per (scheme, host, port, timeouts), least recently
    used key first. Only that loop's thread touches it; closing is the caller's (it
    awaits), so what falls out is returned."""

    def __init__(self) -> None:
        self._idle: OrderedDict[Key, list[httpx.AsyncClient]] = OrderedDict()
        #: Moves on at `close_all`: a client checked out before then is not kept.
        self.generation = 0

    def check_out(self, key: Key, connect_timeout: float, timeout: float) -> httpx.AsyncClient:
        """A client for `key` that no other request is using (a new one if none is idle)."""
        idle = self._idle.get(key)
        if idle:
            self._idle.move_to_end(key)
            return idle.pop()
        return _new_client(connect_timeout, timeout)

    def check_in(
        self, key: Key, client: httpx.AsyncClient, generation: int
    ) -> list[httpx.AsyncClient]:
        """Keep `client` for the next request to `key`; returns the clients to close."""
        if generation != self.generation:
            return [client]  # checked out before `close_all`: the cache stays as it is
        evicted: list[httpx.AsyncClient] = []
        idle = self._idle.setdefault(key, [])
        self._idle.move_to_end(key)
        (idle if len(idle) < MAX_IDLE_PER_KEY else evicted).append(client)
        while len(self._idle) > MAX_CLIENTS:
            _, clients = self._idle.popitem(last=False)
            evicted.extend(clients)
        return evicted

    def close_all(self) -> list[httpx.AsyncClient]:
        """Forget every idle client; returns them to close."""
        self.generation += 1
        clients = [client for idle in self._idle.values() for client in idle]
        self._idle.clear()
        return clients


_loop_caches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _ClientCache] = (
    weakref.WeakKeyDictionary()
)


def _loop_clients() -> _ClientCache:
    loop = asyncio.get_running_loop()
    cache = _loop_caches.get(loop)
    if cache is None:
        cache = _ClientCache()
        _loop_caches[loop] = cache

        async def close_all() -> None:
            _loop_caches.pop(loop, None)  # a loop that goes on starts a fresh cache
            await _aclose(cache.close_all())

        on_loop_close(close_all)
    return cache


async def _aclose(clients: list[httpx.AsyncClient]) -> None:
    for client in clients:
        await client.aclose()


def _key(target: VettedTarget, connect_timeout: float, timeout: float) -> Key:
    return (target.scheme, target.host, target.port, connect_timeout, timeout)


async def post(
    target: VettedTarget,
    headers: dict[str, str],
    body: bytes,
    *,
    connect_timeout: float,
    timeout: float,
    max_bytes: int = MAX_RESPONSE_BYTES,
) -> HttpResult:
    """POST `body` to the first vetted address that accepts a connection, with the
    running event loop's clients."""
    cache = _loop_clients()
    key = _key(target, connect_timeout, timeout)
    generation = cache.generation
    client = cache.check_out(key, connect_timeout, timeout)
    try:
        failure = _NO_ADDRESS
        for address in target.addresses:
            request = _request(client, target, address, headers, body)
            started = time.monotonic()
            try:
                response = await client.send(request, stream=True)
            except (httpx.TransportError, httpx.StreamError) as exc:
                failure, next_address = _classify(exc, started, address)
                if next_address:
                    continue
                return failure
            reading = _CappedBody(response, started, address, max_bytes, timeout)
            try:
                async for chunk in response.aiter_raw():
                    if reading.add(chunk):
                        break
            except httpx.HTTPError as exc:
                reading.broken(exc)
            finally:
                await response.aclose()
            return reading.result()
        return failure
    finally:
        await _aclose(cache.check_in(key, client, generation))


_NO_ADDRESS = HttpResult("connect_error", error="no address to connect to")


def _request(
    client: httpx.AsyncClient,
    target: VettedTarget,
    address: str,
    headers: dict[str, str],
    body: bytes,
) -> httpx.Request:
    return client.build_request(
        "POST",
        target.url_for(address),
        headers={
            "Host": target.host_header,
            "User-Agent": USER_AGENT,
            "Content-Type": "application/json",
            "Accept-Encoding": "identity",
            **headers,
        },
        content=body,
        extensions={"sni_hostname": target.host} if target.scheme == "https" else {},
    )


def _classify(exc: Exception, started: float, address: str) -> tuple[HttpResult, bool]:
    """What a failed send means, and whether the next vetted address may be tried (only
    when nothing was sent: the connection was never made)."""
    if isinstance(exc, httpx.ConnectTimeout):
        return _failure("connect_error", exc, started, address, "connect timed out"), True
    if isinstance(exc, httpx.ConnectError):
        return _failure("connect_error", exc, started, address), True
    if isinstance(exc, httpx.TimeoutException):
        return _failure("timeout", exc, started, address), False
    # Sent (at least partly) and then the connection broke: outcome unknown.
    return _failure("unknown", exc, started, address), False


def _failure(
    kind: str, exc: Exception, started: float, address: str, message: str | None = None
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
        self, response: httpx.Response, started: float, address: str, max_bytes: int, timeout: float
    ) -> None:
        self.response = response
        self.latency_ms = (time.monotonic() - started) * 1000
        self.address = address
        self.max_bytes = max_bytes
        self.deadline = started + timeout
        self.chunks: list[bytes] = []
        self.size = 0
        self.truncated = False
        self.error: str | None = None

    def add(self, chunk: bytes) -> bool:
        """Keep `chunk`; True when reading must stop."""
        self.chunks.append(chunk)
        self.size += len(chunk)
        if self.size > self.max_bytes:
            self.truncated = True
            return True
        if time.monotonic() > self.deadline:
            self.truncated = True
            self.error = "response body too slow; stopped reading"
            return True
        return False

    def broken(self, exc: Exception) -> None:
        self.truncated = True
        self.error = f"{type(exc).__name__} while reading the body"

    def result(self) -> HttpResult:
        return HttpResult(
            "response",
            status_code=self.response.status_code,
            headers=self.response.headers,
            body=b"".join(self.chunks)[: self.max_bytes],
            body_truncated=self.truncated,
            latency_ms=self.latency_ms,
            error=self.error,
            address=self.address,
        )
