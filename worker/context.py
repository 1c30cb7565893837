"""What a handler gets besides its payload: `ctx`.

`ctx` tells the handler which job and attempt it is running, gives it a logger bound to
the job, lets it report progress, and offers `once()` — the effects-ledger helper that
makes a side effect happen at most once per stable key across retries and crashes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import sqlalchemy as sa

from jobdesk.shared.core.effects import find_effect, record_effect
from jobdesk.shared.core.models import jobs
from jobdesk.worker import failpoints

T = TypeVar("T")


class JobLogger(logging.LoggerAdapter[logging.Logger]):
    """Adds the job id, type and attempt to every record (and to JSON log lines)."""

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        extra = dict(self.extra or {})
        extra.update(kwargs.get("extra") or {})
        kwargs["extra"] = extra
        return msg, kwargs


@dataclass
class JobContext:
    """Per-attempt context handed to `handler(payload, ctx)`."""

    job_id: int
    job_type: str
    attempt: int
    max_attempts: int
    idempotency_key: str | None
    engine: sa.Engine
    worker_id: str = ""
    deadline: float | None = None
    """`time.monotonic()` value at which the attempt's hard timeout fires."""
    cancelled: threading.Event = field(default_factory=threading.Event)
    """Set when the attempt timed out or the worker is shutting down; long handlers
    should check it between steps and stop early."""
    _log: logging.LoggerAdapter[logging.Logger] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @property
    def log(self) -> logging.LoggerAdapter[logging.Logger]:
        """A logger bound to the job (its id, type and attempt on every record).

        Built on first use: most handlers never log, and `logging.getLogger` plus the
        adapter were over half of building a context — once per job on the worker's
        hot path.
        """
        log = self._log
        if log is None:
            log = self._log = JobLogger(
                logging.getLogger(f"jobdesk.job.{self.job_type}"),
                {"job_id": self.job_id, "job_type": self.job_type, "attempt": self.attempt},
            )
        return log

    @property
    def is_last_attempt(self) -> bool:
        return self.attempt >= self.max_attempts

    def progress(self, done: int, total: int | None = None, **extra: Any) -> None:
        """Record progress on the job row (visible in the dashboard right away)."""
        value: dict[str, Any] = {"done": done, "total": total, **extra}
        with self.engine.begin() as conn:
            conn.execute(
                sa.update(jobs)
                .where(jobs.c.id == self.job_id, jobs.c.status == "running")
                .values(progress=value)
            )

    def effect_done(self, key: str) -> dict[str, Any] | None:
        """The stored detail if the effect under `key` already happened, else None."""
        with self.engine.connect() as conn:
            return find_effect(conn, key)

    def record_effect(self, key: str, detail: dict[str, Any] | None = None) -> bool:
        """Record the effect under `key` as done (committed at once)."""
        failpoints.hit(failpoints.BEFORE_RECORD)
        with self.engine.begin() as conn:
            return record_effect(conn, key, job_id=self.job_id, detail=detail)

    def once(self, key: str, effect: Callable[[], dict[str, Any] | None]) -> dict[str, Any]:
        """Run `effect()` unless `key` is already in the ledger; returns the stored detail.

        `effect` should carry an id derived from `key` to the outside world, so a repeat
        after a crash between the effect and its recording is recognisable there.
        """
        done = self.effect_done(key)
        if done is not None:
            self.log.info("effect %s already done; skipped", key, extra={"action": "effect_skip"})
            return done
        detail = effect() or {}
        self.record_effect(key, detail)
        return detail
