"""The heartbeat thread: keeps the leases of every job this process holds, and its
`workers` row, alive.

Every `heartbeat_seconds` it extends the lease of each held job (claimed, running, or
finished but not yet written by the completer). A job missing from the answer was
taken away — the reaper decided this worker was gone, e.g. after a long pause — so its
attempt is fenced: the handler is told to stop (`ctx.cancelled`) and nothing will be
written for it. A job whose row was busy (a completion or a progress update holding it:
PostgreSQL renewals skip locked rows rather than wait) is still held, not lost; its
lease is renewed by the next heartbeat.

The renewal also answers which held jobs an operator asked to cancel; each is handed to
`on_cancel_requested` once (the runner sets `ctx.cancelled` and schedules the hard stop).

Its transaction is bounded (`leases.transaction_bound`, half a lease): should this
process freeze inside it, the server ends the session and frees the job rows it locked
long before anyone needs them; no statement of it waits longer for a lock either.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

import sqlalchemy as sa

from jobdesk.shared.core.db import bound_transaction
from jobdesk.shared.core.leases import renew_leases, transaction_bound
from jobdesk.shared.core.worker_registry import heartbeat_worker
from jobdesk.worker import failpoints
from jobdesk.worker.executor import Attempt
from jobdesk.worker.loop import ServiceLoop
from jobdesk.worker.resilience import Backoff

log = logging.getLogger("jobdesk.worker")

CHUNK = 1000


class Heartbeat(ServiceLoop):
    def __init__(
        self,
        engine: sa.Engine,
        *,
        interval: float,
        lease_seconds: float,
        clock: Callable[[], datetime],
        held: Callable[[], list[Attempt]],
        on_fenced: Callable[[Attempt], None],
        worker_id: str,
        register: Callable[[sa.Connection, datetime], None],
        skew: Callable[[], float | None],
        on_cancel_requested: Callable[[Attempt], None] | None = None,
    ) -> None:
        super().__init__(
            "heartbeat", log=log, interval=interval, backoff=Backoff(cap=max(0.5, interval))
        )
        self._engine = engine
        self._lease_seconds = lease_seconds
        self._clock = clock
        self._held = held
        self._on_fenced = on_fenced
        self._on_cancel_requested = on_cancel_requested
        self._worker_id = worker_id
        self._register = register
        self._skew = skew
        self.beats = 0
        #: Leases passed over because their row was busy (kept; renewed next beat).
        self.skipped = 0

    def step(self) -> None:
        self.beat()

    def beat(self) -> None:
        attempts = self._held()
        by_id = {a.job.id: a for a in attempts}
        refs = [a.job.ref for a in attempts]
        now = self._clock()
        kept: set[int] = set()
        stopping: list[int] = []
        busy = 0
        with self._engine.begin() as conn:
            bound_transaction(conn, transaction_bound(self._lease_seconds))
            # The `workers` row first: it is the one write here that may wait for a lock,
            # and no job row is held yet while it does (completions never queue behind it).
            if not heartbeat_worker(
                conn, self._worker_id, now=now, clock_skew_seconds=self._skew()
            ):
                self._register(conn, now)
            for start in range(0, len(refs), CHUNK):
                renewal = renew_leases(
                    conn, refs[start : start + CHUNK], lease_seconds=self._lease_seconds, now=now
                )
                kept.update(renewal.renewed)
                kept.update(renewal.busy)  # still ours: renewed next time
                busy += len(renewal.busy)
                stopping.extend(renewal.stopping)
            failpoints.hit(failpoints.IN_RENEW)
        self.beats += 1
        self.skipped += busy
        if busy:
            log.debug(
                "%d leases not renewed this time (rows busy); next heartbeat renews them",
                busy,
                extra={"action": "lease_renewal_skipped", "jobs": busy},
            )
        for job_id, attempt in by_id.items():
            if job_id not in kept and attempt.fence():
                log.warning(
                    "job %s: lease lost to another worker; stopping it and writing nothing",
                    job_id,
                    extra={"action": "lease_lost", "job_id": job_id},
                )
                self._on_fenced(attempt)
        if self._on_cancel_requested is not None:
            for job_id in stopping:
                attempt = by_id[job_id]
                if not attempt.cancel_requested and not attempt.settled:
                    self._on_cancel_requested(attempt)
