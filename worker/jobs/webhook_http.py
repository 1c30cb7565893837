"""One webhook HTTP request to a vetted address: timeouts, no redirects, capped reads.

The request goes to an address the SSRF guard vetted (the URL's host is replaced by
the IP), while the `Host` header and the TLS SNI/certificate check keep the real host
name — so DNS is asked exactly once per delivery and a rebinding answer cannot redirect
the request. Proxies from the environment are ignored for the same reason. Redirects are
never followed (a 3xx is an answer, not a hop). At most `max_bytes` of the response
body are read (raw, no decompression), then the connection is dropped.

Clients are pooled per (scheme, host, port, timeouts) so keep-alive works across
deliveries to the same endpoint; a client is never shared between host names, because
a pooled TLS connection carries the SNI of the host it was opened for.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

import httpx

from jobdesk.shared.webhooks.ssrf import VettedTarget

MAX_RESPONSE_BYTES = 64 * 1024
MAX_CLIENTS = 64
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


_clients: OrderedDict[tuple[object, ...], httpx.Client] = OrderedDict()
_lock = threading.Lock()


def _client(target: VettedTarget, connect_timeout: float, timeout: float) -> httpx.Client:
    key = (target.scheme, target.host, target.port, connect_timeout, timeout)
    with _lock:
        client = _clients.get(key)
        if client is not None:
            _clients.move_to_end(key)
            return client
        client = httpx.Client(
            timeout=httpx.Timeout(
                connect=connect_timeout, read=timeout, write=timeout, pool=timeout
            ),
            follow_redirects=False,
            trust_env=False,
            limits=httpx.Limits(max_connections=32, max_keepalive_connections=16),
        )
        _clients[key] = client
        while len(_clients) > MAX_CLIENTS:
            _, old = _clients.popitem(last=False)
            old.close()
        return client


def close_clients() -> None:
    """Close every pooled client (worker shutdown, tests)."""
    with _lock:
        while _clients:
            _, client = _clients.popitem()
            client.close()


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
    client = _client(target, connect_timeout, timeout)
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
