"""`webhook.deliver`: a signed Standard Webhooks POST to a named endpoint.

Payload::

    {"endpoint": "crm", "event": "user.created", "data": {...}}
    {"endpoint": "crm", "event": "user.created", "data_ref": {"user_id": 42}}

The body — `{"type": event, "timestamp": <event time>, "data": ...}` — is built at
delivery time (`data_ref` goes through the app's data resolver, or is sent as is).
`webhook-id` is derived from the job's idempotency key, or from the original job of a
requeue chain, so every attempt and every operator requeue of the same event carries
the same id; `webhook-timestamp` and the signature are new per attempt.

Classification (E1/E3):

The effect key (the webhook-id's source) is reserved in the effects ledger before the
POST — in the same statement that reads the endpoint — so a second job of the same
event running at the same moment waits for this one and then skips ("already
delivered by job #N"); a reservation whose attempt lost its job is taken over, and the
one repeat that can cause carries the same `webhook-id`. The reservation is given
back whenever the event was certainly not delivered (no connection, an error answer,
a hold), and kept when it may have been (timeout, connection lost after sending).

| answer | outcome |
|---|---|
| 2xx | delivered (effect recorded; later runs skip) |
| 408, 425, 429, 5xx | retry on the webhook schedule; `Retry-After` honoured, capped |
| timeout, connection refused/reset, DNS failure | retry (same `webhook-id`) |
| connection lost after sending (E3) | outcome `unknown`, retry with the same `webhook-id` |
| 410 Gone | endpoint disabled (paused with the reason), job dead |
| 3xx (never followed), other 4xx, unsafe URL | dead |

A paused endpoint, an open circuit breaker (`webhook:<name>`) or a spent per-endpoint
rate limit snoozes the job without using an attempt. Every request is logged in
`webhook_deliveries`.

The handler is `async def`: the worker runs it on its event loop, many at once; the
database steps around the POST run in the loop's thread pool (`_get_ready` before, a
failure's delivery log after), the POST itself on the loop (`webhook_http`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.db import one_statement
from jobdesk.shared.core.effects import Reservation, release_effect
from jobdesk.shared.core.errors import PermanentError, RetryAfter, Snooze
from jobdesk.shared.core.retry import Schedule
from jobdesk.shared.limits.breakers import BreakerView
from jobdesk.shared.tracing.otel import inject_headers
from jobdesk.shared.webhooks.deliveries import (
    DeliveryOrigin,
    delivery_origin,
    delivery_writer,
    excerpt,
    record_delivery,
)
from jobdesk.shared.webhooks.endpoints import Endpoint, disable_endpoint
from jobdesk.shared.webhooks.preflight import Preflight, preflight
from jobdesk.shared.webhooks.secret_headers import SecretHeaderError, secret_headers
from jobdesk.shared.webhooks.signing import signed_headers
from jobdesk.shared.webhooks.ssrf import ResolutionError, UnsafeURLError, VettedTarget, check_url
from jobdesk.worker.context import EFFECT_WAIT_SECONDS, JobContext
from jobdesk.worker.jobs.config import JobsConfig, jobs_config
from jobdesk.worker.jobs.guards import DbTime, pass_guards, record_health
from jobdesk.worker.jobs.hooks import resolve_data
from jobdesk.worker.jobs.webhook_http import HttpResult, post
from jobdesk.worker.registry import job

#: 1 min, 5 min, 30 min, 2 h, 6 h, then every 12 h (+ up to 10 % jitter).
WEBHOOK_SCHEDULE = Schedule.of_seconds([60, 300, 1800, 7200, 21600, 43200])
RETRYABLE_STATUS = frozenset({408, 425, 429})
MAX_EFFECT_KEY = 300


class WebhookDeliveryError(Exception):
    """A transient delivery failure (retry with the same webhook-id)."""


def _text(payload: dict[str, Any], name: str) -> str:
    value = payload.get(name)
    if not isinstance(value, str) or not value.strip():
        raise PermanentError(f"payload.{name} must be a non-empty string")
    return value


def _data(payload: dict[str, Any], event: str) -> Any:
    if "data" in payload and "data_ref" in payload:
        raise PermanentError("payload: give either data or data_ref, not both")
    if "data_ref" in payload:
        ref = payload["data_ref"]
        if not isinstance(ref, dict):
            raise PermanentError("payload.data_ref must be an object")
        resolved = resolve_data(event, ref)
        return ref if resolved is None else resolved
    return payload.get("data", {})


def effect_key(ctx: JobContext, endpoint: str, event: str, origin_job_id: int) -> str:
    key = ctx.idempotency_key or f"webhook:{endpoint}:{event}:job:{origin_job_id}"
    if len(key) > MAX_EFFECT_KEY:
        key = "webhook:sha256:" + hashlib.sha256(key.encode()).hexdigest()
    return key


def breaker_key(endpoint: str) -> str:
    """The circuit breaker guarding one endpoint."""
    return f"webhook:{endpoint}"


def webhook_id(key: str) -> str:
    """The receiver's idempotency key: stable for every attempt of the same event."""
    return "msg_" + hashlib.sha256(key.encode()).hexdigest()[:32]


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds from a `Retry-After` header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())


@dataclass
class Delivery:
    """One attempt's state, passed between the steps of the handler."""

    ctx: JobContext
    cfg: JobsConfig
    endpoint: Endpoint
    key: str
    msg_id: str
    clock: DbTime
    healthy: bool = True

    @property
    def breaker_key(self) -> str:
        return breaker_key(self.endpoint.name)

    def log(
        self,
        outcome: str,
        result: HttpResult | None = None,
        *,
        error: str | None = None,
        failure: str | None = None,
        disable_reason: str | None = None,
        effect: dict[str, Any] | None = None,
        release: bool = False,
    ) -> None:
        """Delivery row, breaker health, a 410 disable and the effect record (or, with
        `release`, the reservation given back), in one transaction, so a crash before
        its commit loses all of them together. A delivery that needs nothing but the row
        and the effect — the common case — writes them with the attempt's outcome (the
        job's completion): no round trip and commit of their own per delivery."""
        now = self.clock()
        row: dict[str, Any] = {
            "job_id": self.ctx.job_id,
            "attempt": self.ctx.attempt,
            "endpoint": self.endpoint.name,
            "webhook_id": self.msg_id,
            "url": self.endpoint.url,
            "outcome": outcome,
            "now": now,
            "status_code": result.status_code if result else None,
            "latency_ms": round(result.latency_ms, 2) if result else None,
            "response_excerpt": _response_excerpt(result),
            "error": error or (result.error if result else None),
            "effect": None if effect is None else (self.key, effect),
            "lease_token": self.ctx.lease_token,
        }
        engine = self.ctx.engine
        if failure is None and disable_reason is None and self.healthy and not release:
            self.ctx.with_outcome(delivery_writer(engine, **row))
            return
        ref, healthy = self.ctx.ref, self.healthy

        def write(conn: sa.Connection) -> None:
            record_delivery(conn, **row)
            record_health(conn, self.breaker_key, now, self.cfg, error=failure, was_healthy=healthy)
            if disable_reason is not None:
                disable_endpoint(conn, self.endpoint.name, reason=disable_reason, now=now)
            if release:
                release_effect(conn, self.key, ref)

        # The request happened (or certainly did not): its record is made even when the
        # database is away for a while, with the attempt's outcome at the latest.
        self.ctx.record_after_effect("webhook.deliver delivery log", write)


@contextmanager
def _statements(engine: sa.Engine) -> Iterator[sa.Connection]:
    """A connection for work that is one statement at a time on PostgreSQL: autocommit
    there (no BEGIN/COMMIT or ROLLBACK round trips around a single statement, which is
    atomic on its own); SQLite, and PostgreSQL behind PgBouncer (where a deadline needs a
    transaction), keep the engine's transaction."""
    if one_statement(engine) is engine:
        with engine.begin() as conn:
            yield conn
        return
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT")
        yield conn


def _hold_or_pass(delivery: Delivery, breaker: BreakerView) -> None:
    """Snooze while the endpoint is paused, rate limited or its breaker is open."""
    endpoint, now = delivery.endpoint, delivery.clock()
    if endpoint.is_paused(now):
        wait = delivery.cfg.paused_recheck_seconds
        if endpoint.paused_until is not None:
            wait = min(wait, max((endpoint.paused_until - now).total_seconds(), 0.0))
        raise Snooze(wait, f"endpoint {endpoint.name} is paused: {endpoint.paused_reason or ''}")
    delivery.healthy = delivery.ctx.db_call(
        "webhook.deliver guards",
        lambda: pass_guards(
            delivery.ctx.engine,
            breaker=breaker,
            limit=delivery.cfg.webhook_rate_limit(endpoint.name),
            now=now,
        ),
    )


def _response_excerpt(result: HttpResult | None) -> str | None:
    if result is None or result.kind != "response":
        return None
    text = excerpt(result.body)
    if result.body_truncated:
        text = f"{text or ''} [truncated after {len(result.body):,} bytes]"
    return text


def _header(result: HttpResult, name: str) -> str | None:
    return result.headers.get(name.lower()) if result.headers is not None else None


def _vet(delivery: Delivery) -> VettedTarget:
    endpoint = delivery.endpoint
    try:
        return check_url(endpoint.url, allow_private=delivery.cfg.allow_private_webhook_targets)
    except UnsafeURLError as exc:
        delivery.log("blocked", error=f"unsafe URL: {exc}")
        raise PermanentError(f"endpoint {endpoint.name}: unsafe URL: {exc}") from None
    except ResolutionError as exc:
        delivery.log("dns_error", error=str(exc), failure=str(exc))
        raise WebhookDeliveryError(f"endpoint {endpoint.name}: {exc}") from None


@dataclass
class _Ready:
    """A delivery cleared to send: the vetted target and the signed request."""

    delivery: Delivery
    target: VettedTarget
    headers: dict[str, str]
    body: bytes


@job("webhook.deliver", backoff=WEBHOOK_SCHEDULE)
async def deliver_webhook(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Deliver one event to one endpoint, at most once per webhook-id as far as we know.

    On the worker's event loop: the database steps before and after the POST run in a
    thread (they block), the POST itself on the loop, so hundreds of deliveries wait on
    their receivers at once without holding a thread each."""
    ready = await asyncio.to_thread(_get_ready, payload, ctx)
    if not isinstance(ready, _Ready):
        return ready  # delivered before: the ledger's record
    delivery = ready.delivery
    headers = ready.headers
    trace: dict[str, str] = {}
    inject_headers(trace)  # `traceparent`: the receiver may continue the attempt's trace
    if trace:
        headers = {**headers, **trace}
    result = await post(
        ready.target,
        headers,
        ready.body,
        connect_timeout=delivery.cfg.webhook_connect_timeout_seconds,
        timeout=delivery.cfg.webhook_timeout_seconds,
    )
    if delivery.healthy and _delivered(result):
        # The common case writes nothing of its own: its records go with the outcome.
        return _conclude(delivery, result)
    return await asyncio.to_thread(_conclude, delivery, result)


def _get_ready(payload: dict[str, Any], ctx: JobContext) -> _Ready | dict[str, Any]:
    """The endpoint, the ledger's reservation and the signed request; the ledger's record
    instead when the event was delivered before."""
    cfg = jobs_config(ctx.settings)
    name = _text(payload, "endpoint")
    event = _text(payload, "event")
    key = effect_key(ctx, name, event, ctx.job_id)

    def look_up() -> tuple[Preflight, DeliveryOrigin, Reservation | None, str]:
        with _statements(ctx.engine) as conn:
            facts = preflight(
                conn,
                job_id=ctx.job_id,
                endpoint=name,
                breaker_key=breaker_key(name),
                effect_key=key,
                lease_token=ctx.lease_token,
            )
            origin, reservation, first_key = facts.origin, facts.reservation, key
            if origin is None:  # requeued by an operator: the event is the chain's first's
                origin = delivery_origin(conn, ctx.job_id)
                first_key = effect_key(ctx, name, event, origin.job_id)
                if first_key != key:
                    reservation = None
        return facts, origin, reservation, first_key

    facts, origin, reservation, key = ctx.db_call("webhook.deliver lookups", look_up)
    endpoint, clock = facts.endpoint, DbTime(facts.now)
    if endpoint is None:
        raise PermanentError(f"unknown webhook endpoint {name!r}")
    if reservation is None:  # held, abandoned or not yet asked: the ledger decides
        reservation = ctx.reserve(key)
    if reservation.done is not None:
        done = {**reservation.done, "skipped": "already delivered"}
        if reservation.by_job is not None and reservation.by_job != ctx.job_id:
            done["delivered_by_job"] = reservation.by_job
        return done
    if reservation.held:
        raise Snooze(
            EFFECT_WAIT_SECONDS,
            f"webhook {webhook_id(key)} is being delivered by job #{reservation.by_job}",
        )
    delivery = Delivery(ctx, cfg, endpoint, key, webhook_id(key), clock)
    try:
        target, headers, encoded = _prepare(delivery, facts.breaker, payload, event, origin)
        if facts.secret_headers:
            headers = {**headers, **_secret_headers(ctx)}
    except BaseException:
        ctx.release(key)  # nothing was sent: held, bad data, an unsafe URL or header
        raise
    return _Ready(delivery, target, headers, encoded)


def _secret_headers(ctx: JobContext) -> dict[str, str]:
    """The job's `header.*` secrets as request headers (see `secret_headers`)."""
    try:
        return secret_headers(ctx.secrets)
    except SecretHeaderError as exc:
        raise PermanentError(str(exc)) from None


def _prepare(
    delivery: Delivery,
    breaker: BreakerView,
    payload: dict[str, Any],
    event: str,
    origin: DeliveryOrigin,
) -> tuple[VettedTarget, dict[str, str], bytes]:
    """Everything before the POST: the holds, the body, the vetted target, the headers."""
    _hold_or_pass(delivery, breaker)
    document = {"type": event, "timestamp": origin.created_at.isoformat(), "data": None}
    document["data"] = _data(payload, event)
    try:
        body = json.dumps(document, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise PermanentError(f"webhook data is not JSON: {exc}") from None
    target = _vet(delivery)
    encoded = body.encode()
    # `webhook-timestamp` from the database clock: a host whose own clock is off would
    # otherwise sign with a time the receiver rejects (5-minute tolerance).
    signed_at = delivery.clock()
    headers = signed_headers(
        delivery.endpoint.signing_secrets(signed_at),
        delivery.msg_id,
        encoded,
        timestamp=int(signed_at.timestamp()),
    )
    return target, headers.as_dict(), encoded


def _delivered(result: HttpResult) -> bool:
    """A 2xx answer: the receiver took the event."""
    return result.kind == "response" and 200 <= (result.status_code or 0) < 300


def _conclude(delivery: Delivery, result: HttpResult) -> dict[str, Any]:
    endpoint, cfg = delivery.endpoint, delivery.cfg
    where = f"endpoint {endpoint.name}"
    if result.kind != "response":
        # No connection means nothing was sent; a timeout or a lost connection may have
        # delivered it, so the reservation stays for the retry to take over.
        not_sent = result.kind == "connect_error"
        delivery.log(result.kind, result, failure=result.error or result.kind, release=not_sent)
        if result.kind == "unknown":
            raise WebhookDeliveryError(
                f"{where}: outcome unknown (connection lost after sending): {result.error}"
            )
        raise WebhookDeliveryError(f"{where}: {result.kind}: {result.error}")
    status = result.status_code or 0
    line = f"{where} answered HTTP {status}"
    if _delivered(result):
        detail = {
            "webhook_id": delivery.msg_id,
            "endpoint": endpoint.name,
            "status_code": status,
            "latency_ms": round(result.latency_ms, 2),
        }
        delivery.log("delivered", result, effect=detail)
        return detail
    if status == 410:
        delivery.log("gone", result, disable_reason=f"410 Gone from {endpoint.url}", release=True)
        raise PermanentError(f"{line}: endpoint disabled (410 Gone)")
    if status in RETRYABLE_STATUS or status >= 500:
        # 408/425/429 say "not now", not "broken": only 5xx count against the breaker.
        delivery.log("retry", result, failure=line if status >= 500 else None, release=True)
        wait = parse_retry_after(_header(result, "retry-after"), delivery.clock())
        if wait is not None and math.isfinite(wait):
            capped = min(wait, cfg.webhook_retry_after_cap_seconds)
            raise RetryAfter(capped, f"{line}; Retry-After {wait:g}s (using {capped:g}s)")
        raise WebhookDeliveryError(line)
    delivery.log("rejected", result, release=True)
    if 300 <= status < 400:
        location = _header(result, "location") or ""
        raise PermanentError(f"{line}: redirect to {location!r} not followed")
    raise PermanentError(f"{line}: {_response_excerpt(result) or 'no body'}")
