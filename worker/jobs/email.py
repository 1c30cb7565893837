"""`email.send`: render a versioned template and send it at most once per dedup key.

Payload (references, not rendered output)::

    {"to": "ana@example.com" | "to_user_id": 42,
     "template": "welcome", "event_id": "signup:42", "context": {...}}

Exactly-once effect: the dedup key is the job's idempotency key, else
`email:{to}:{template}:{event_id}` (`email:user:{id}:…` for `to_user_id`; without an
event id, the original job's id stands in). Before sending, the effects ledger is
checked; after the server accepted the mail, the key is recorded with the template
name + version, a hash of the rendered content and the SMTP reply. The `Message-ID` is
derived from the key, so if the worker dies between the server's `250` and the
recording, the re-sent mail carries the same `Message-ID` and is recognisable as a
duplicate downstream.

Classification (E4): connect errors, timeouts and 4xx → retry with backoff (and count
against the `smtp:default` circuit breaker); 5xx, a missing/invalid address, a deleted
user, an unknown template or a missing template variable → dead at once. An open
breaker or an exhausted rate limit snoozes the job without using an attempt.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.headerregistry import Address
from email.message import EmailMessage
from email.utils import format_datetime
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.effects import Reservation, complete_effect, find_done_effect
from jobdesk.shared.core.errors import PermanentError, Snooze
from jobdesk.shared.core.masking import mask_email
from jobdesk.shared.core.retry import ExponentialBackoff
from jobdesk.shared.limits.breakers import breaker_state
from jobdesk.shared.tracing.otel import inject_headers
from jobdesk.shared.webhooks.deliveries import delivery_origin
from jobdesk.worker.context import EFFECT_WAIT_SECONDS, JobContext
from jobdesk.worker.jobs.config import JobsConfig, jobs_config
from jobdesk.worker.jobs.email_provider import (
    MailConfigError,
    MailProvider,
    PermanentMailError,
    SmtpProvider,
    TransientMailError,
    parse_smtp_url,
)
from jobdesk.worker.jobs.email_templates import RenderedEmail, TemplateError, load_template, render
from jobdesk.worker.jobs.guards import DbTime, pass_guards, record_health
from jobdesk.worker.jobs.hooks import NoResolverError, resolve_recipient
from jobdesk.worker.registry import job

EMAIL_BACKOFF = ExponentialBackoff(base=timedelta(seconds=30), cap=timedelta(hours=2))
MAX_ADDRESS_LENGTH = 254
MAX_EFFECT_KEY = 300
_FORBIDDEN_IN_HEADERS = ("\r", "\n", "\x00")

ProviderFactory = Callable[[JobsConfig], MailProvider]
_provider_factory: list[ProviderFactory] = []


def set_mail_provider(factory: ProviderFactory | None) -> None:
    """Replace the SMTP provider (e.g. with an HTTP API provider); None restores SMTP."""
    _provider_factory.clear()
    if factory is not None:
        _provider_factory.append(factory)


def _provider(cfg: JobsConfig) -> MailProvider:
    if _provider_factory:
        return _provider_factory[0](cfg)
    return SmtpProvider(parse_smtp_url(cfg.smtp_url, timeout=cfg.smtp_timeout_seconds))


def check_header(name: str, value: str) -> str:
    """Refuse header injection: no CR, LF or NUL in any header we set."""
    if any(char in value for char in _FORBIDDEN_IN_HEADERS):
        raise PermanentError(f"email header {name} contains CR, LF or NUL")
    return value


def check_address(field: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise PermanentError(f"{field}: missing email address")
    value = check_header(field, value.strip())
    if len(value) > MAX_ADDRESS_LENGTH:
        raise PermanentError(f"{field}: email address longer than {MAX_ADDRESS_LENGTH}")
    try:
        parsed = Address(addr_spec=value)
    except (ValueError, IndexError) as exc:
        raise PermanentError(f"{field}: invalid email address {value!r}: {exc}") from None
    if not parsed.username or not parsed.domain or parsed.addr_spec != value:
        raise PermanentError(f"{field}: invalid email address {value!r}")
    return value


def _text_field(payload: dict[str, Any], name: str, *, required: bool) -> str | None:
    value = payload.get(name)
    if value is None:
        if required:
            raise PermanentError(f"payload.{name} is required")
        return None
    if not isinstance(value, str | int) or isinstance(value, bool) or str(value) == "":
        raise PermanentError(f"payload.{name} must be a non-empty string")
    return str(value)


def _recipient(payload: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """(address, dedup identity, resolver context)."""
    if "to" in payload and "to_user_id" in payload:
        raise PermanentError("payload: give either to or to_user_id, not both")
    if "to_user_id" in payload:
        user_id = payload["to_user_id"]
        if not isinstance(user_id, int) or isinstance(user_id, bool):
            raise PermanentError("payload.to_user_id must be an integer")
        try:
            found = resolve_recipient(user_id)
        except NoResolverError as exc:
            raise PermanentError(str(exc)) from None
        if found is None:
            raise PermanentError(f"deleted user: no recipient for user {user_id}")
        address = check_address("to_user_id", found.email)
        return address, f"user:{user_id}", dict(found.context)
    address = check_address("payload.to", payload.get("to"))
    return address, address, {}


def dedup_key(
    ctx: JobContext, identity: str, template: str, event_id: str | None, origin: int
) -> str:
    if ctx.idempotency_key:
        key = ctx.idempotency_key
    else:
        event = event_id if event_id is not None else f"job:{origin}"
        key = f"email:{identity}:{template}:{event}"
    if len(key) > MAX_EFFECT_KEY:
        key = "email:sha256:" + hashlib.sha256(key.encode()).hexdigest()
    return key


def message_id(key: str, sender: str) -> str:
    """A Message-ID that is the same for every attempt under the same dedup key."""
    domain = sender.rpartition("@")[2] or "localhost"
    return f"<{hashlib.sha256(key.encode()).hexdigest()[:40]}.jobdesk@{domain}>"


def build_message(rendered: RenderedEmail, *, sender: str, to: str, msg_id: str) -> EmailMessage:
    message = EmailMessage()  # default policy: RFC 5322, refuses raw newlines too
    message["From"] = check_header("From", sender)
    message["To"] = check_header("To", to)
    message["Subject"] = check_header("Subject", rendered.subject)
    message["Message-ID"] = msg_id
    message["Date"] = format_datetime(datetime.now(UTC))
    message["Auto-Submitted"] = "auto-generated"
    trace: dict[str, str] = {}
    inject_headers(trace)  # the attempt's trace, for a mail system that follows it
    if "traceparent" in trace:
        message["traceparent"] = trace["traceparent"]
    message.set_content(rendered.text)
    if rendered.html is not None:
        message.add_alternative(rendered.html, subtype="html")
    return message


def _context(payload: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    extra = payload.get("context", {})
    if not isinstance(extra, dict):
        raise PermanentError("payload.context must be an object")
    return {**base, **extra}


def _record_outcome(
    ctx: JobContext,
    cfg: JobsConfig,
    key: str,
    clock: DbTime,
    *,
    healthy: bool,
    error: str | None = None,
    effect: tuple[str, dict[str, Any]] | None = None,
) -> None:
    """Breaker health and (after a 250) the effect record, in one transaction — made
    even when the database is away for a while (`ctx.record_after_effect`): the mail
    server's answer already happened."""
    if error is None and healthy and effect is None:
        return
    now = clock()
    ref = ctx.ref

    def write(conn: sa.Connection) -> None:
        record_health(conn, key, now, cfg, error=error, was_healthy=healthy)
        if effect is not None:
            complete_effect(conn, effect[0], ref, effect[1])

    what = "email.send record" if effect is not None else "email.send breaker health"
    ctx.record_after_effect(what, write)


def _already_sent(
    ctx: JobContext, key: str, done: dict[str, Any], by_job: int | None
) -> dict[str, Any]:
    by = f" by job #{by_job}" if by_job is not None and by_job != ctx.job_id else ""
    ctx.log.info("email %s already sent%s; skipped", key, by, extra={"action": "email_skip"})
    result = {**done, "skipped": "already sent"}
    if by:
        result["sent_by_job"] = by_job
    return result


@job("email.send", backoff=EMAIL_BACKOFF)
def send_email(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Send one templated email, at most once per dedup key."""
    cfg = jobs_config(ctx.settings)
    template_name = _text_field(payload, "template", required=True)
    assert template_name is not None
    event_id = _text_field(payload, "event_id", required=False)
    address, identity, base_context = _recipient(payload)

    def look_up() -> tuple[str, Reservation | None, DbTime]:
        with ctx.engine.connect() as conn:
            origin = 0
            if not ctx.idempotency_key and event_id is None:
                origin = delivery_origin(conn, ctx.job_id).job_id
            key = dedup_key(ctx, identity, template_name, event_id, origin)
            return key, find_done_effect(conn, key), DbTime(db_now(conn))

    key, sent, clock = ctx.db_call("email.send lookups", look_up)
    if sent is not None and sent.done is not None:
        return _already_sent(ctx, key, sent.done, sent.by_job)

    try:
        template = load_template(cfg.email_templates_dir, template_name)
        context = {
            **_context(payload, base_context),
            "to": address,
            "event_id": event_id,
        }
        rendered = render(template, context)
    except TemplateError as exc:
        raise PermanentError(str(exc)) from None
    sender = check_address("JOBDESK_MAIL_FROM", cfg.mail_from)
    msg_id = message_id(key, sender)
    message = build_message(rendered, sender=sender, to=address, msg_id=msg_id)

    try:
        provider = _provider(cfg)
    except MailConfigError as exc:
        raise RuntimeError(str(exc)) from None

    def guards() -> bool:
        with ctx.engine.connect() as conn:
            breaker = breaker_state(conn, provider.key, clock())
        return pass_guards(ctx.engine, breaker=breaker, limit=cfg.smtp_rate_limit, now=clock())

    healthy = ctx.db_call("email.send guards", guards)
    # Reserve the key before sending: a second job with the same key (the double-clicked
    # sign-up) waits for this one instead of sending too (B16).
    reservation = ctx.reserve(key)
    if reservation.done is not None:
        return _already_sent(ctx, key, reservation.done, reservation.by_job)
    if reservation.held:
        raise Snooze(EFFECT_WAIT_SECONDS, f"email {key} is being sent by job #{reservation.by_job}")
    try:
        result = provider.send(message, sender=sender, recipients=[address])
    except TransientMailError as exc:
        # Not accepted by the server (a 4xx, or no connection): nothing was sent.
        ctx.release(key)
        _record_outcome(ctx, cfg, provider.key, clock, healthy=healthy, error=str(exc))
        raise
    except PermanentMailError as exc:
        # The server answered: it is healthy, the mail is what it refused.
        ctx.release(key)
        _record_outcome(ctx, cfg, provider.key, clock, healthy=healthy)
        raise PermanentError(str(exc)) from None
    detail = {
        "dedup_key": key,
        "message_id": msg_id,
        "to": mask_email(address),
        "template": rendered.template,
        "template_version": rendered.version,
        "content_sha256": rendered.content_hash(),
        "provider": provider.key,
        "smtp_code": result.code,
        "smtp_reply": result.reply,
        "provider_message_id": result.provider_message_id,
    }
    _record_outcome(ctx, cfg, provider.key, clock, healthy=healthy, effect=(key, detail))
    ctx.log.info("email %s sent", msg_id, extra={"action": "email_sent", "message_id": msg_id})
    return detail
