"""One webhook HTTP request to a vetted address: timeouts, no redirects, capped reads.

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
wait on one another's connection pool.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

import httpx

from jobdesk.shared.webhooks.ssrf import VettedTarget

MAX_RESPONSE_BYTES = 64 * 1024
#: Endpoints (scheme, host, port, timeouts) whose idle clients are kept.
MAX_CLIENTS = 64
#: Idle clients kept per endpoint: one per concurrent request, up to this many.
MAX_IDLE_PER_KEY = 64
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


def _new_client(connect_timeout: float, timeout: float) -> httpx.Client:
    # One request at a time per client, so its pool holds one keep-alive connection (a
    # second for a fallback address). A client shared by every handler thread made them
    # queue on its pool lock, and each request scanned all its idle connections.
    return httpx.Client(
        timeout=httpx.Timeout(connect=connect_timeout, read=timeout, write=timeout, pool=timeout),
        follow_redirects=False,
        trust_env=False,
        limits=httpx.Limits(max_connections=2, max_keepalive_connections=1),
    )


Key = tuple[object, ...]


class _ClientCache:
    """Idle clients per (scheme, host, port, timeouts), least recently used key first."""

    def __init__(self) -> None:
        self._idle: OrderedDict[Key, list[httpx.Client]] = OrderedDict()
        self._lock = threading.Lock()
        #: Moves on at `close_all`: a client checked out before then is not kept.
        self.generation = 0

    def check_out(self, key: Key, connect_timeout: float, timeout: float) -> httpx.Client:
        """A client for `key` that no other request is using (a new one if none is idle)."""
        with self._lock:
            idle = self._idle.get(key)
            if idle:
                self._idle.move_to_end(key)
                return idle.pop()
        return _new_client(connect_timeout, timeout)

    def check_in(self, key: Key, client: httpx.Client, generation: int) -> None:
        """Keep `client` for the next request to `key`; close what falls out."""
        evicted: list[httpx.Client] = []
        with self._lock:
            if generation != self.generation:
                # Checked out before `close_all`: closed, and the cache left as it is.
                evicted.append(client)
            else:
                idle = self._idle.setdefault(key, [])
                self._idle.move_to_end(key)
                (idle if len(idle) < MAX_IDLE_PER_KEY else evicted).append(client)
            while len(self._idle) > MAX_CLIENTS:
                _, clients = self._idle.popitem(last=False)
                evicted.extend(clients)
        for old in evicted:
            old.close()

    def close_all(self) -> None:
        with self._lock:
            self.generation += 1
            clients = [client for idle in self._idle.values() for client in idle]
            self._idle.clear()
        for client in clients:
            client.close()


_clients = _ClientCache()


def close_clients() -> None:
    """Close every idle client; one in use is closed when its request ends (worker
    shutdown, tests)."""
    _clients.close_all()


def post(
    target: VettedTarget,
    headers: dict[str, str],
    body: bytes,
    *,
    connect_timeout: float,
    timeout: float,
    max_bytes: int = MAX_RESPONSE_BYTES,
) -> HttpResult:
    """POST `body` to the first vetted address that accepts a connection."""
    key = (target.scheme, target.host, target.port, connect_timeout, timeout)
    generation = _clients.generation
    client = _clients.check_out(key, connect_timeout, timeout)
    try:
        return _send(client, target, headers, body, timeout, max_bytes)
    finally:
        _clients.check_in(key, client, generation)


def _send(
    client: httpx.Client,
    target: VettedTarget,
    headers: dict[str, str],
    body: bytes,
    timeout: float,
    max_bytes: int,
) -> HttpResult:
    request_headers = {
        "Host": target.host_header,
        "User-Agent": USER_AGENT,
        "Content-Type": "application/json",
        "Accept-Encoding": "identity",
        **headers,
    }
    extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
    failure = HttpResult("connect_error", error="no address to connect to")
    for address in target.addresses:
        request = client.build_request(
            "POST",
            target.url_for(address),
            headers=request_headers,
            content=body,
            extensions=extensions,
        )
        started = time.monotonic()
        try:
            response = client.send(request, stream=True)
        except httpx.ConnectTimeout as exc:
            failure = _failure("connect_error", exc, started, address, "connect timed out")
            continue
        except httpx.ConnectError as exc:
            failure = _failure("connect_error", exc, started, address)
            continue
        except httpx.TimeoutException as exc:
            return _failure("timeout", exc, started, address)
        except (httpx.TransportError, httpx.StreamError) as exc:
            # Sent (at least partly) and then the connection broke: outcome unknown.
            return _failure("unknown", exc, started, address)
        latency = (time.monotonic() - started) * 1000
        return _read_capped(response, latency, address, max_bytes, started + timeout)
    return failure


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


def _read_capped(
    response: httpx.Response, latency_ms: float, address: str, max_bytes: int, deadline: float
) -> HttpResult:
    chunks: list[bytes] = []
    size = 0
    truncated = False
    error: str | None = None
    try:
        for chunk in response.iter_raw():
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                truncated = True
                break
            if time.monotonic() > deadline:
                truncated = True
                error = "response body too slow; stopped reading"
                break
    except httpx.HTTPError as exc:
        # The status line arrived; a broken body does not change the answer.
        truncated = True
        error = f"{type(exc).__name__} while reading the body"
    finally:
        response.close()
    body = b"".join(chunks)[:max_bytes]
    return HttpResult(
        "response",
        status_code=response.status_code,
        headers=response.headers,
        body=body,
        body_truncated=truncated,
        latency_ms=latency_ms,
        error=error,
        address=address,
    )
