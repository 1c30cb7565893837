"""The verdict: classify every enqueued job and every planned fault after a chaos run.

Per job (by the id its committed enqueue returned), OK classes:

- succeeded once: final `succeeded`, its effect applied exactly once, delivered once;
- succeeded after a caught duplicate: applied once but delivered again (same
  `webhook-id` / `Message-ID` / ledger key) and recognised as a repeat;
- dead as planted: a job built to die ended `dead` without its effect.

Failing classes: lost (the enqueue committed, the row is gone), stuck running,
unfinished (still queued/failed after the drain), effect applied twice (two effect rows,
or two distinct ids applied for one event), effect missing, dead unplanned, planted but
succeeded, completed twice (two `succeeded` attempt rows), attempts over max, attempt
history inconsistent (two rows for one attempt number).

Across all jobs, the run also fails on doubled effects (a key of `chaos_effects` — the
same-database effects — with more than one row) and on attempts spent by database
trouble: an attempt counted against its job (failed, timed out, permanent) whose error
is a database error out of Jobdesk's own calls. Database errors in a handler's own work
are raised as `HandlerDatabaseError` by the chaos handlers: those count as the
handler's failures, as they would in production, and are only reported.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.models import job_attempts, jobs
from jobdesk.shared.core.states import JobStatus
from tests.chaos.receivers import SmtpSink, WebhookReceiver
from tests.chaos.tables import KEY_LIMIT, chaos_effects, chaos_once

#: Job types whose effect is a `chaos_effects` row.
EFFECT_TYPES = ("chaos.effect", "chaos.async_effect", "chaos.keyed_effect", "chaos.once_db")
OK_CLASSES = ("succeeded once", "succeeded after a caught duplicate", "dead as planted")

#: Attempt outcomes that count against the job's attempts.
COUNTED = frozenset({"failed", "timeout", "permanent"})
#: The first line of an attempt's error when a database error ended it.
DATABASE_ERROR = re.compile(
    r"^(OperationalError|InterfaceError|InternalError|DatabaseError|DBAPIError|"
    r"PendingRollbackError|DatabaseUnavailable|TimeoutError: QueuePool)\b"
)
HANDLER_DATABASE_ERROR = "HandlerDatabaseError"


@dataclass(frozen=True)
class Planned:
    """One job the driver enqueued (and saw committed)."""

    key: str
    job_id: int
    job_type: str
    dies: bool


@dataclass
class Verdict:
    classes: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    examples: defaultdict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    lost_attempts: int = 0
    attempts_total: int = 0
    db_attempts: int = 0
    """Attempts spent by database trouble in Jobdesk's own calls (must be 0)."""
    handler_db_attempts: int = 0
    """Attempts the handlers' own database work failed (their failures; reported)."""
    doubled_effects: int = 0
    """Same-database effect keys applied more than once (must be 0)."""
    keyed_peaks: dict[str, int] = field(default_factory=dict)
    """The most attempts of each concurrency key that ran at once (at most its limit)."""

    @property
    def passed(self) -> bool:
        return not self.failures

    def bad(self, job_class: str, detail: str) -> None:
        self.classes[job_class] += 1
        if len(self.examples[job_class]) < 5:
            self.examples[job_class].append(detail)


@dataclass
class AttemptRows:
    outcomes: dict[int, Counter[str]]
    duplicates: set[tuple[int, int]]
    database: list[str]
    """`job <id> attempt <n>: <first line>` of attempts database trouble spent."""
    handler_database: int
    #: (concurrency key, started_at, finished_at) of every attempt of a keyed job.
    keyed: list[tuple[str, Any, Any]] = field(default_factory=list)


def _rows(engine: sa.Engine) -> tuple[dict[int, Any], AttemptRows]:
    with engine.connect() as conn:
        job_rows = {
            row.id: row
            for row in conn.execute(
                sa.select(
                    jobs.c.id,
                    jobs.c.status,
                    jobs.c.attempts,
                    jobs.c.max_attempts,
                    jobs.c.result,
                    jobs.c.last_error,
                    jobs.c.concurrency_key,
                )
            )
        }
        rows = AttemptRows(defaultdict(Counter), set(), [], 0)
        seen: set[tuple[int, int]] = set()
        for job_id, attempt, outcome, error, started, finished in conn.execute(
            sa.select(
                job_attempts.c.job_id,
                job_attempts.c.attempt,
                job_attempts.c.outcome,
                job_attempts.c.error,
                job_attempts.c.started_at,
                job_attempts.c.finished_at,
            )
        ):
            rows.outcomes[job_id][outcome] += 1
            key = getattr(job_rows.get(job_id), "concurrency_key", None)
            if key is not None:
                rows.keyed.append((key, started, finished))
            if (job_id, attempt) in seen:
                rows.duplicates.add((job_id, attempt))
            seen.add((job_id, attempt))
            first = (error or "").split("\n", 1)[0]
            if outcome in COUNTED and first.startswith(HANDLER_DATABASE_ERROR):
                rows.handler_database += 1
            elif outcome in COUNTED and DATABASE_ERROR.match(first):
                rows.database.append(f"job {job_id} attempt {attempt}: {first[:160]}")
    return job_rows, rows


def _peaks(spans: list[tuple[str, Any, Any]]) -> dict[str, int]:
    """Per key, the most attempts open at once; at equal times an end comes first. An
    attempt with no end yet counts as open to the last moment."""
    steps: defaultdict[str, list[tuple[Any, int]]] = defaultdict(list)
    for key, started, finished in spans:
        steps[key].append((started, 1))
        if finished is not None:
            steps[key].append((finished, -1))
    peaks = {}
    for key, moves in steps.items():
        running = peak = 0
        for _, step in sorted(moves, key=lambda move: (move[0], move[1])):
            running += step
            peak = max(peak, running)
        peaks[key] = peak
    return peaks


def _effects(engine: sa.Engine) -> tuple[Counter[str], dict[str, int]]:
    with engine.connect() as conn:
        query = sa.select(chaos_effects.c.key, sa.func.count()).group_by(chaos_effects.c.key)
        applied: Counter[str] = Counter(dict(conn.execute(query).all()))
        once = dict(conn.execute(sa.select(chaos_once.c.key, chaos_once.c.deliveries)).all())
    return applied, once


def check(
    engine: sa.Engine,
    planned: list[Planned],
    receiver: WebhookReceiver,
    sink: SmtpSink,
) -> Verdict:
    verdict = Verdict()
    job_rows, attempt_rows = _rows(engine)
    outcomes, duplicate_attempts = attempt_rows.outcomes, attempt_rows.duplicates
    effect_rows, once_rows = _effects(engine)
    smtp = sink.handler
    for item in planned:
        row = job_rows.get(item.job_id)
        where = f"job {item.job_id} ({item.job_type}, key {item.key})"
        if row is None:
            verdict.bad("lost", where)
            continue
        verdict.attempts_total += row.attempts
        verdict.lost_attempts += outcomes[item.job_id]["lost"]
        applied, deliveries, skipped = _effect_of(item, effect_rows, once_rows, receiver, smtp)
        result = row.result if isinstance(row.result, dict) else {}
        skipped = skipped or "skipped" in result
        status = JobStatus(row.status)
        if applied > 1:
            verdict.bad("effect applied twice", f"{where}: applied {applied} times")
        elif row.attempts > row.max_attempts:
            verdict.bad("attempts over max", f"{where}: {row.attempts}/{row.max_attempts}")
        elif status is JobStatus.RUNNING:
            verdict.bad("stuck running", where)
        elif status in (JobStatus.QUEUED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.WAITING):
            verdict.bad("unfinished", f"{where}: {status} ({(row.last_error or '')[:120]})")
        elif status is JobStatus.DEAD:
            if item.dies and applied == 0:
                verdict.classes["dead as planted"] += 1
            elif item.dies:
                verdict.bad("effect applied twice", f"{where}: planted dead job applied")
            else:
                error = (row.last_error or "").splitlines()[:1]
                verdict.bad("dead unplanned", f"{where}: {error}")
        elif item.dies:
            verdict.bad("planted but succeeded", where)
        elif outcomes[item.job_id]["succeeded"] != 1:
            verdict.bad(
                "completed twice", f"{where}: {outcomes[item.job_id]['succeeded']} success rows"
            )
        elif applied == 0:
            verdict.bad("effect missing", where)
        elif deliveries > 1 or skipped:
            verdict.classes["succeeded after a caught duplicate"] += 1
        else:
            verdict.classes["succeeded once"] += 1
    for key, peak in sorted(_peaks(attempt_rows.keyed).items()):
        verdict.keyed_peaks[key] = peak
        if peak > KEY_LIMIT:
            verdict.failures.append(
                f"{peak} attempts of concurrency key {key} ran at once (limit {KEY_LIMIT})"
            )
    for job_id, attempt in sorted(duplicate_attempts)[:5]:
        verdict.bad("attempt history inconsistent", f"job {job_id}: two rows for attempt {attempt}")
    doubled = [key for key, n in effect_rows.items() if n > 1]
    verdict.doubled_effects = len(doubled)
    if doubled and not verdict.classes["effect applied twice"]:
        verdict.bad("effect applied twice", f"effect rows doubled for keys {doubled[:5]}")
    verdict.db_attempts = len(attempt_rows.database)
    verdict.handler_db_attempts = attempt_rows.handler_database
    if attempt_rows.database:
        verdict.failures.append(
            f"{len(attempt_rows.database)} attempt(s) spent by database trouble in Jobdesk's "
            "own calls: " + "; ".join(attempt_rows.database[:5])
        )
    if receiver.bad_signatures:
        verdict.failures.append(f"webhooks with a bad signature: {dict(receiver.bad_signatures)}")
    for job_class, count in verdict.classes.items():
        if job_class not in OK_CLASSES and count:
            verdict.failures.append(
                f"{count} job(s) {job_class}: " + "; ".join(verdict.examples[job_class])
            )
    return verdict


def _effect_of(
    item: Planned,
    effect_rows: Counter[str],
    once_rows: dict[str, int],
    receiver: WebhookReceiver,
    smtp: Any,
) -> tuple[int, int, bool]:
    """(times applied, times delivered, known duplicate) for the job's logical effect."""
    key = item.key
    if item.job_type in (
        "chaos.effect",
        "chaos.async_effect",
        "chaos.keyed_effect",
        "chaos.once_db",
    ):
        return effect_rows[key], effect_rows[key], False
    if item.job_type == "chaos.abort":
        return 0, 0, False
    if item.job_type in ("chaos.once", "chaos.async_once"):
        delivered = once_rows.get(key, 0)
        return min(delivered, 1), delivered, False
    if item.job_type == "email.send":
        with smtp.lock:
            ids = set(smtp.by_key.get(key, set()))
            delivered = sum(smtp.accepted[i] for i in ids)
        return len(ids), delivered, False
    if item.job_type == "webhook.deliver":
        with receiver.lock:
            ids = set(receiver.keys_applied.get(key, set()))
            delivered = len(ids) + sum(receiver.repeats[i] for i in ids)
        return len(ids), delivered, False
    raise ValueError(f"no effect model for {item.job_type}")
