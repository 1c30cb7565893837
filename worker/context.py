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

from jobdesk.shared.core.claim import JobRef
from jobdesk.shared.core.effects import find_effect, record_effect
from jobdesk.shared.core.transitions import record_progress
from jobdesk.shared.settings import Settings
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
    lease_token: int = 0
    """The claim's fencing token: every write of this attempt carries it."""
    settings: Settings = field(default_factory=Settings.from_env)
    """The settings the worker runs with (the built-in types read theirs from here);
    a context made by hand (a handler's unit test) reads the environment."""
    deadline: float | None = None
    """`time.monotonic()` value at which the attempt's hard timeout fires."""
    log: logging.LoggerAdapter[logging.Logger] = field(init=False)
    cancelled: threading.Event = field(default_factory=threading.Event)
    """Set when the attempt timed out or the worker is shutting down; long handlers
    should check it between steps and stop early."""

    def __post_init__(self) -> None:
        self.log = JobLogger(
            logging.getLogger(f"jobdesk.job.{self.job_type}"),
            {"job_id": self.job_id, "job_type": self.job_type, "attempt": self.attempt},
        )

    @property
    def is_last_attempt(self) -> bool:
        return self.attempt >= self.max_attempts

    def progress(self, done: int, total: int | None = None, **extra: Any) -> bool:
        """Record progress on the job row (visible in the dashboard right away); False
        when this attempt no longer holds the job (its lease was lost), like every
        other write of a worker that lost its lease."""
        value: dict[str, Any] = {"done": done, "total": total, **extra}
        ref = JobRef(self.job_id, self.lease_token, self.attempt, self.worker_id)
        with self.engine.begin() as conn:
            return record_progress(conn, ref, value)

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
