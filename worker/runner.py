"""The worker process: claim → run on slots → write outcomes, until told to stop.

Threads and what they own:

- main (dispatcher): claims batches sized to each group's free slots plus its prefetch
  allowance, hands them to the group's `SlotPool`, hands back prefetched jobs the slots
  will not start soon, enforces hard timeouts, handles signals and shutdown;
- slot threads (per group): run handlers (`executor.execute`);
- completer: writes outcomes in batches (`completer.Completer`);
- heartbeat: extends held leases and the `workers` row, and hears of cancel requests
  (`heartbeat.Heartbeat`);
- listener (PostgreSQL): LISTEN wakes the dispatcher on enqueue (`listener.Listener`);
  behind PgBouncer only with `JOBDESK_LISTEN_URL`, otherwise polling alone;
- APScheduler: leader election and maintenance (`maintenance.scheduler.Maintenance`).

The dispatcher claims for a group only when there may be work: at start, after a claim
that came back full, on a NOTIFY for one of its queues, and every poll interval. Every
database call is retried with capped, jittered backoff — the process never exits
because the database is away (D1, D3).

Shutdown (SIGTERM/SIGINT): stop claiming at once, hand back the prefetched jobs no slot
has started, let running handlers finish within `shutdown_timeout`, then release what is
left (back to `queued`, attempt not counted),
flush the completer, give up leadership, deregister, exit 0. A second signal ends the
grace period at once. Exit status 3 means the process stopped itself because too many
handler threads were stuck past their timeout (see `jobdesk.worker.pool`).
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from importlib import metadata
from types import FrameType
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.claim import claim
from jobdesk.shared.core.clock import DatabaseClock
from jobdesk.shared.core.db import autocommits, one_statement
from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.job_types import TypeDefaults
from jobdesk.shared.core.notifications import listen_url
from jobdesk.shared.core.published_types import (
    CACHE_TTL_SECONDS,
    Republished,
    publish_defaults,
)
from jobdesk.shared.core.worker_registry import (
    deregister_worker,
    mark_stopping,
    new_worker_id,
    register_worker,
)
from jobdesk.shared.settings import Settings
from jobdesk.shared.tracing.otel import tracing_configured
from jobdesk.shared.tracing.store import StoredTrace, traces_of
from jobdesk.worker import failpoints
from jobdesk.worker.async_pool import AsyncPool
from jobdesk.worker.completer import Completer, RecordOutcomes
from jobdesk.worker.config import WorkerConfig
from jobdesk.worker.executor import (
    Attempt,
    Outcome,
    attach_traces,
    execute,
    execute_async,
    make_attempt,
)
from jobdesk.worker.heartbeat import Heartbeat
from jobdesk.worker.lanes import Lane, lanes_for
from jobdesk.worker.listener import Listener
from jobdesk.worker.maintenance.scheduler import Maintenance
from jobdesk.worker.maintenance.tasks import MaintenanceContext
from jobdesk.worker.pool import SlotPool, crashed_outcome
from jobdesk.worker.registry import Registry
from jobdesk.worker.resilience import DB_ERRORS, Backoff, HeldConnection, OutageLog
from jobdesk.worker.watchdog import FreezeWatchdog
from jobdesk.worker.witness import RunningAttempt, running_report

log = logging.getLogger("jobdesk.worker")

EXIT_OK = 0
EXIT_STUCK_THREADS = 3
#: Outcomes waiting for the completer beyond which the dispatcher stops claiming.
MAX_PENDING_WRITES = 5000
#: How long shutdown waits for the completer to write the last outcomes.
FINAL_FLUSH_SECONDS = 10.0
#: While handlers run, hard timeouts are checked this often (their precision).
DEADLINE_TICK_SECONDS = 0.05
#: A busy group with only a few free slots claims at most this often.
CLAIM_COOLDOWN_SECONDS = 0.02


def _version() -> str:
    try:
        return metadata.version("jobdesk")
    except metadata.PackageNotFoundError:
        return "unknown"


#: Net allocations between young-generation collections once the worker runs (default
#: 700). The hot path allocates a few objects per job and frees them by reference
#: counting; the collector mostly finds nothing.
GC_GEN0_THRESHOLD = 20_000


def _tune_gc() -> None:
    """Keep the cyclic garbage collector off the hot path of a worker process.

    Everything alive after start-up (modules, SQLAlchemy metadata, job types) stays alive
    for the life of the process; `gc.freeze()` moves it out of the collector's sight, so
    a full collection no longer walks ~100k objects (measured: 2 full collections cost
    370 ms while draining 20k jobs, ~18 µs per job; 3 ms frozen). Collections are also
    made rarer. Only for a process the runner owns (the `jobdesk worker` command).
    """
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


class Runner:
    """One worker process's runtime. `run()` blocks until shutdown; returns the exit code."""

    def __init__(
        self,
        engine: sa.Engine,
        *,
        registry: Registry,
        config: WorkerConfig,
        settings: Settings,
        handler_engine: sa.Engine | None = None,
        worker_id: str | None = None,
        install_signals: bool = True,
        record_outcomes: RecordOutcomes | None = None,
        tune_gc: bool = False,
        watchdog: FreezeWatchdog | None = None,
    ) -> None:
        self.engine = engine
        self.watchdog = watchdog
        self.handler_engine = handler_engine or engine
        self.registry = registry
        self.config = config
        self.settings = settings
        self.worker_id = worker_id or new_worker_id()
        self.install_signals = install_signals
        self.tune_gc = tune_gc
        self.job_types = registry.names()
        self.clock = DatabaseClock(engine)
        self.exit_code = EXIT_OK
        self.stopping = threading.Event()
        self._wake = threading.Event()
        self._signals = 0
        self._grace_end: float | None = None
        self._held: dict[int, Attempt] = {}
        self._held_lock = threading.Lock()
        self.lanes = lanes_for(config, *registry.names_by_kind())
        self._more: dict[str, bool] = {lane.key: True for lane in self.lanes}
        self._last_claim: dict[str, float] = {lane.key: 0.0 for lane in self.lanes}
        self._next_check = 0.0  # monotonic time of the next hard-timeout check
        self._claim_backoff = Backoff()
        self._claim_retry_at = 0.0
        self._claim_outage = OutageLog(log, "claim")
        # PostgreSQL: a claim is ONE statement, atomic on its own; in autocommit it runs
        # and commits in one round trip instead of three (BEGIN, claim, COMMIT) — except
        # behind PgBouncer, where only a transaction carries its deadline.
        # SQLite keeps its `BEGIN IMMEDIATE` transaction (the claim reads the clock first).
        self._claim_conn = HeldConnection(
            one_statement(engine), before_return=driver(engine).end_claim_session
        )
        self.claimed_total = 0
        self.outcomes: Counter[str] = Counter()
        self.pools: dict[str, SlotPool | AsyncPool] = {
            lane.key: self._pool_for(lane) for lane in self.lanes
        }
        self.completer = Completer(
            engine,
            clock=self.clock.now,
            policy_for=registry.policy_for,
            worker_id=self.worker_id,
            on_written=self._on_written,
            record_outcomes=record_outcomes,
        )
        self.heartbeat = Heartbeat(
            engine,
            interval=config.heartbeat_seconds,
            lease_seconds=config.lease_seconds,
            clock=self.clock.now,
            held=self.held,
            on_fenced=self.completer.submit,
            on_cancel_requested=self._on_cancel_requested,
            worker_id=self.worker_id,
            register=self._register,
            skew=self._skew,
        )
        self.listener: Listener | None = None
        wake_url = listen_url(engine, settings.listen_url) if driver(engine).listens else None
        if wake_url is not None:
            self.listener = Listener(
                wake_url, self._on_queues, connect_timeout=settings.db_connect_timeout_seconds
            )
        self.maintenance = Maintenance(
            MaintenanceContext(
                engine,
                settings,
                policy_for=self.registry.policy_for,
                heartbeat_seconds=config.heartbeat_seconds,
                schedules=tuple(self.registry.schedules()),
            ),
            holder=self.worker_id,
            leader_ttl=config.leader_lease_seconds,
            clock=self.clock.now,
        )

    def _pool_for(self, lane: Lane) -> SlotPool | AsyncPool:
        if lane.is_async:
            return AsyncPool(
                lane.key,
                lane.slots,
                run=self._run_attempt_async,
                on_timeout=self._on_timeout,
                on_free=self._wake.set,
                on_crash=self._on_slot_crash,
            )
        return SlotPool(
            lane.key,
            lane.slots,
            run=self._run_attempt,
            on_timeout=self._on_timeout,
            on_free=self._wake.set,
            on_crash=self._on_slot_crash,
        )

    # ----------------------------------------------------------------- lifecycle
    def run(self) -> int:
        if self.watchdog is not None:
            self.watchdog.prepare()  # forks its witness: before any thread here starts
        try:
            if self.install_signals:
                self._install_signal_handlers()
            if not self._start():
                return self.exit_code
            if self.tune_gc:
                _tune_gc()
            if self.watchdog is not None:
                self.watchdog.start(self.earliest_deadline, self._running_attempts)
            try:
                self._dispatch_loop()
            finally:
                self._shutdown()
        finally:
            if self.watchdog is not None:
                self.watchdog.stop()
        return self.exit_code

    def request_stop(self, *, immediate: bool = False) -> None:
        """What SIGTERM does; `immediate` is the second signal (no grace left)."""
        if immediate:
            self._grace_end = time.monotonic()
        self.stopping.set()
        self._wake.set()

    def _install_signal_handlers(self) -> None:
        def handle(signum: int, _frame: FrameType | None) -> None:
            self._signals += 1
            name = signal.Signals(signum).name
            if self._signals == 1:
                log.info(
                    "%s: stopping claims; finishing running jobs within %gs",
                    name,
                    self.config.shutdown_timeout_seconds,
                    extra={"action": "shutdown_requested", "signal": name},
                )
                self.request_stop()
            else:
                log.info(
                    "%s again: releasing running jobs now",
                    name,
                    extra={"action": "shutdown_hurried", "signal": name},
                )
                self.request_stop(immediate=True)

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)

    def _start(self) -> bool:
        backoff = Backoff()
        outage = OutageLog(log, "startup")
        while not self.stopping.is_set():
            try:
                self.clock.sync()
                now = self.clock.now()
                with self.engine.begin() as conn:
                    self._register(conn, now)
                    republished = self._publish_defaults(conn, now)
            except DB_ERRORS as exc:
                delay = backoff.next()
                outage.failed(exc, delay)
                self.stopping.wait(delay)
                continue
            outage.recovered()
            self._log_republished(republished)
            break
        if self.stopping.is_set():
            return False
        self.completer.start()
        self.heartbeat.start()
        if self.listener is not None:
            self.listener.start()
        elif driver(self.engine).listens:
            log.info(
                "no LISTEN through PgBouncer: new jobs are found by polling every %gs "
                "(set JOBDESK_LISTEN_URL to a direct connection to wake on enqueue)",
                self.config.poll_interval_seconds,
                extra={"action": "listen_off", "worker_id": self.worker_id},
            )
        self.maintenance.start()
        log.info(
            "worker %s started: %s; %d job types; lease %gs, poll %gs",
            self.worker_id,
            ", ".join(
                (f"{lane.group.name}" if lane.group.queues else "all queues")
                + ("=" if not lane.is_async else " async=")
                + str(lane.slots)
                for lane in self.lanes
            ),
            len(self.job_types),
            self.config.lease_seconds,
            self.config.poll_interval_seconds,
            extra={
                "action": "worker_started",
                "worker_id": self.worker_id,
                "pid": os.getpid(),
                "job_types": self.job_types,
            },
        )
        return True

    def _register(self, conn: sa.Connection, now: datetime) -> None:
        queues = sorted({q for g in self.config.groups for q in (g.queues or ("*",))})
        register_worker(
            conn,
            worker_id=self.worker_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            queues=queues,
            job_types=self.job_types,
            concurrency=self.config.total_slots,
            version=_version(),
            now=now,
            clock_skew_seconds=self._skew(),
        )

    def _publish_defaults(self, conn: sa.Connection, now: datetime) -> list[Republished]:
        """Tell enqueueing processes that never import the job modules what this worker
        declared (queue, priority, attempts, timeout); the last worker to start wins."""
        declared = {}
        for name in self.job_types:
            job_type = self.registry.get(name)
            if job_type is not None:
                declared[name] = TypeDefaults(
                    job_type.queue,
                    job_type.priority,
                    job_type.max_attempts,
                    job_type.timeout_seconds,
                    job_type.concurrency,
                )
        return publish_defaults(conn, declared, worker_id=self.worker_id, now=now)

    def _log_republished(self, republished: list[Republished]) -> None:
        for change in republished:
            before = change.before.defaults
            log.warning(
                "job type %s: this worker's defaults (queue %s, priority %d, %d attempts, "
                "timeout %ss) replace those published by %s at %s (queue %s, priority %d, "
                "%d attempts, timeout %ss); enqueueing processes use them within %gs",
                change.job_type,
                change.after.queue,
                change.after.priority,
                change.after.max_attempts,
                f"{change.after.timeout_seconds:g}" if change.after.timeout_seconds else "-",
                change.before.published_by,
                change.before.published_at.isoformat(timespec="seconds"),
                before.queue,
                before.priority,
                before.max_attempts,
                f"{before.timeout_seconds:g}" if before.timeout_seconds else "-",
                CACHE_TTL_SECONDS,
                extra={
                    "action": "job_type_republished",
                    "job_type": change.job_type,
                    "previous_worker_id": change.before.published_by,
                },
            )

    def _skew(self) -> float | None:
        return round(self.clock.skew.total_seconds(), 3)

    # ----------------------------------------------------------------- dispatching
    def _dispatch_loop(self) -> None:
        poll = self.config.poll_interval_seconds
        next_poll = time.monotonic() + poll
        while not self.stopping.is_set():
            self._wake.clear()
            now = time.monotonic()
            if now >= self._next_check:
                self._next_check = self._check_deadlines(now)
                if self._too_many_stuck():
                    break
            if now >= next_poll:
                for name in self._more:
                    self._more[name] = True
                next_poll = now + poll
            self._hand_back_excess(now)
            again = self._claim_round(now)
            if again <= 0:
                continue
            now = time.monotonic()
            wake_at = min(next_poll, self._next_check)
            if self._claim_retry_at > now:
                wake_at = min(wake_at, self._claim_retry_at)
            timeout = wake_at - now
            self._wake.wait(max(0.0, min(timeout, again)))

    def _check_deadlines(self, now: float) -> float:
        """Time out overrunning attempts; returns when to look again."""
        until = min(p.check_deadlines(now) for p in self.pools.values())
        if any(p.busy for p in self.pools.values()):
            # Attempts that start later may have short timeouts: keep looking while busy.
            until = min(until, DEADLINE_TICK_SECONDS)
        return now + max(until, 0.0)

    def _claim_round(self, now: float) -> float:
        """Claim for every group that may have work.

        Returns 0 to go again at once (a claim came back full and slots are free),
        else how long until a deferred claim is due (inf: wait for a wake-up).
        """
        if now < self._claim_retry_at or self.completer.pending > MAX_PENDING_WRITES:
            return float("inf")
        again = float("inf")
        for lane in self.lanes:
            pool = self.pools[lane.key]
            free = pool.free()
            if free <= 0 or not self._more[lane.key] or self.stopping.is_set():
                continue
            since = now - self._last_claim[lane.key]
            if free < pool.wake_threshold and pool.busy and since < CLAIM_COOLDOWN_SECONDS:
                # Busy and only a few slots free: wait briefly for more to free up, so a
                # backlog is claimed in batches instead of one job per statement.
                again = min(again, CLAIM_COOLDOWN_SECONDS - since)
                continue
            limit = min(free, self.config.claim_batch)
            got = self._claim(lane, limit)
            self._last_claim[lane.key] = time.monotonic()
            if got is None:
                return float("inf")
            claimed, kept = got
            full = len(claimed) == limit
            # Only a claim that found nothing says the lane has nothing due until the
            # next poll or notification. A short one may have stopped short of a
            # backlog (rows another claim held were skipped, not waited for): look once
            # more after the cooldown, which costs one empty claim when it was the end.
            self._more[lane.key] = bool(claimed)
            if claimed:
                self._hand_over(pool, claimed, kept)
            if full:
                if pool.free() > 0:
                    again = 0.0
            elif claimed:
                again = min(again, CLAIM_COOLDOWN_SECONDS)
        return again

    def _claim(
        self, lane: Lane, limit: int
    ) -> tuple[list[Any], dict[int, StoredTrace] | None] | None:
        """The claimed jobs and, when attempts are traced, the trace contexts kept for
        them (None: not traced); None when the claim failed."""
        kept: dict[int, StoredTrace] | None = None
        try:
            with self._claim_conn.begin() as conn:
                jobs = claim(
                    conn,
                    worker_id=self.worker_id,
                    limit=limit,
                    queues=lane.group.queues,
                    job_types=lane.job_types,
                    lease_seconds=self.config.lease_seconds,
                    # No `now`: the claim reads the database clock itself (PostgreSQL: in
                    # the same statement), exact where an estimate could make a job
                    # enqueued a moment ago look not yet due.
                )
                if jobs and tracing_configured():
                    kept = self._kept_traces(conn, jobs)
        except DB_ERRORS as exc:
            delay = self._claim_backoff.next()
            self._claim_outage.failed(exc, delay)
            self._claim_retry_at = time.monotonic() + delay
            return None
        except Exception:
            # Not an outage (a constraint, a bug): log it with its stack and back off the
            # same way rather than let one bad claim end the process.
            delay = self._claim_backoff.next()
            log.exception("claim failed; retrying in %.2fs", delay, extra={"action": "claim_error"})
            self._claim_retry_at = time.monotonic() + delay
            return None
        if jobs:
            failpoints.hit(failpoints.AFTER_CLAIM)
        if self._claim_backoff.failures:
            self._claim_backoff.reset()
            self._claim_outage.recovered()
        return jobs, kept

    def _kept_traces(self, conn: sa.Connection, jobs: list[Any]) -> dict[int, StoredTrace] | None:
        """The trace contexts kept for a claimed batch, read on the claim's connection (a
        transaction of its own would cost two more round trips per claim). In autocommit
        the claim is committed already: a failure here must not lose the batch, whose
        attempts then look their contexts up one by one (None). In a transaction (behind
        PgBouncer) it fails the claim like any other: nothing was taken."""
        ids = [job.id for job in jobs]
        if not autocommits(conn):
            return traces_of(conn, ids)
        try:
            return traces_of(conn, ids)
        except DB_ERRORS:
            return None

    def _hand_over(
        self,
        pool: SlotPool | AsyncPool,
        claimed: list[Any],
        kept: dict[int, StoredTrace] | None = None,
    ) -> None:
        get_type = self.registry.get
        engine = self.handler_engine
        attempts = []
        for job in claimed:
            job_type = get_type(job.job_type)
            assert job_type is not None  # claim only takes registered types
            attempts.append(make_attempt(job, job_type, engine, self.settings))
        if kept is not None:
            attach_traces(attempts, kept)
        with self._held_lock:
            for attempt in attempts:
                self._held[attempt.job.id] = attempt
        self.claimed_total += len(attempts)
        pool.submit(attempts)
        self._next_check = min(self._next_check, time.monotonic() + DEADLINE_TICK_SECONDS)

    def _hand_back_excess(self, now: float) -> None:
        """Prefetched jobs the slots will not start soon go back to the queue, for any
        process to start (see `jobdesk.worker.pool`)."""
        for pool in self.pools.values():
            if pool.busy > pool.slots or pool.stranded:
                self._hand_back(pool.take_excess(now), "handed back unstarted: slots are busy")

    def _hand_back(self, attempts: list[Attempt], reason: str) -> int:
        """Release attempts no slot has started (back to `queued`, attempt not counted)."""
        released = 0
        for attempt in attempts:
            if attempt.release(reason):
                released += 1
                self.completer.submit(attempt)
        return released

    def _on_queues(self, queues: list[str] | None) -> None:
        for lane in self.lanes:
            if queues is None or any(lane.group.serves(q) for q in queues):
                self._more[lane.key] = True
        self._wake.set()

    # ----------------------------------------------------------------- attempts
    def _run_attempt(self, attempt: Attempt) -> None:
        if self._starts(attempt):
            outcome = execute(attempt.job, attempt.job_type, attempt.ctx, clock=self.clock.now)
            self._ended(attempt, outcome)

    async def _run_attempt_async(self, attempt: Attempt) -> None:
        """`_run_attempt` for an `async def` handler, on its slot group's event loop."""
        if self._starts(attempt):
            outcome = await execute_async(
                attempt.job, attempt.job_type, attempt.ctx, clock=self.clock.now
            )
            self._ended(attempt, outcome)

    def _starts(self, attempt: Attempt) -> bool:
        """False when a cancel request came while the job waited: it ends unstarted."""
        if attempt.cancel_requested:
            if attempt.cancel_unstarted():
                self.completer.submit(attempt)
            return False
        if self.watchdog is not None:
            self.watchdog.attempt_began(attempt.deadline)
        return True

    def _ended(self, attempt: Attempt, outcome: Outcome) -> None:
        if attempt.finish(attempt.stopped_on_request(outcome)):
            self.completer.submit(attempt)

    def _on_slot_crash(self, attempt: Attempt, exc: BaseException) -> None:
        """A slot thread failed while it held `attempt` (see `jobdesk.worker.pool`)."""
        if attempt.settle(crashed_outcome(attempt, exc)):
            self.completer.submit(attempt)

    def _on_cancel_requested(self, attempt: Attempt) -> None:
        """The heartbeat found an operator's cancel request on a job this process runs."""
        grace = self.config.cancel_grace_seconds
        if not attempt.request_cancel(grace):
            return
        log.info(
            "job %s (%s): cancel requested; ctx.cancelled is set, hard stop in %gs",
            attempt.job.id,
            attempt.job.job_type,
            grace,
            extra={"action": "cancel_requested", "job_id": attempt.job.id},
        )
        # The dispatcher checks deadlines while slots are busy; look again now.
        self._next_check = 0.0
        self._wake.set()

    def _on_timeout(self, attempt: Attempt) -> None:
        stopped = (
            "its task is cancelled" if attempt.job_type.is_async else "its thread is abandoned"
        )
        if attempt.cancel_requested:
            if attempt.stop_hard():
                self.completer.submit(attempt)
            log.warning(
                "job %s (%s) did not stop within %gs of its cancel request; %s",
                attempt.job.id,
                attempt.job.job_type,
                attempt.cancel_grace,
                stopped,
                extra={"action": "job_stopped_hard", "job_id": attempt.job.id},
            )
            return
        if attempt.time_out():
            self.completer.submit(attempt)
        log.warning(
            "job %s (%s) exceeded its %gs timeout; %s",
            attempt.job.id,
            attempt.job.job_type,
            attempt.timeout,
            stopped,
            extra={"action": "job_timeout", "job_id": attempt.job.id},
        )

    def _on_written(self, batch: list[Attempt]) -> None:
        with self._held_lock:
            for attempt in batch:
                if self._held.get(attempt.job.id) is attempt:
                    del self._held[attempt.job.id]
        self.outcomes.update([a.outcome.kind.value for a in batch if a.outcome is not None])
        unblocked = {a.job.queue for a in batch if a.job.group_key is not None}
        if unblocked:
            # The next job of each finished job's group just became claimable.
            self._on_queues(sorted(unblocked))

    def earliest_deadline(self) -> float | None:
        """The monotonic hard-timeout deadline due first among running attempts (what
        the freeze watchdog waits for, plus its grace)."""
        deadlines = [d for p in self.pools.values() if (d := p.earliest_deadline()) is not None]
        return min(deadlines, default=None)

    def _running_attempts(self) -> tuple[str, list[RunningAttempt]]:
        """This worker's id and the attempts its slots run (for the watchdog's witness)."""
        return self.worker_id, running_report(a for p in self.pools.values() for a in p.running())

    def held(self) -> list[Attempt]:
        with self._held_lock:
            return list(self._held.values())

    def _too_many_stuck(self) -> bool:
        stuck = sum(p.abandoned_alive for p in self.pools.values())
        if stuck <= self.config.max_stuck_threads:
            return False
        log.error(
            "%d handler threads are stuck past their timeout (limit %d); stopping so the "
            "supervisor can start a fresh process",
            stuck,
            self.config.max_stuck_threads,
            extra={"action": "too_many_stuck_threads", "stuck": stuck},
        )
        self.exit_code = EXIT_STUCK_THREADS
        self.request_stop()
        return True

    # ----------------------------------------------------------------- shutdown
    def _running(self) -> int:
        return sum(p.running_count for p in self.pools.values())

    def _shutdown(self) -> None:
        self._best_effort(
            "mark stopping", lambda conn, now: mark_stopping(conn, self.worker_id, now=now)
        )
        released = 0
        for pool in self.pools.values():
            released += self._hand_back(pool.take_waiting(), "worker shutting down")
        if self._grace_end is None:
            self._grace_end = time.monotonic() + self.config.shutdown_timeout_seconds
        while self._running() and time.monotonic() < (self._grace_end or 0.0):
            self._wake.clear()
            next_check = self._check_deadlines(time.monotonic())
            self._wake.wait(max(0.0, min(next_check, self._grace_end) - time.monotonic()))
        released += self._hand_back(self.held(), "worker shutting down")
        for pool in self.pools.values():
            pool.stop()
        self._claim_conn.close()
        self.maintenance.stop()
        if self.listener is not None:
            self.listener.stop()
        if not self.completer.wait_idle(FINAL_FLUSH_SECONDS):
            log.warning(
                "could not write %d outcomes before exiting; their leases will expire and "
                "the reaper will retry them",
                self.completer.pending,
                extra={"action": "flush_incomplete"},
            )
        self.completer.stop()
        self.heartbeat.stop()
        self._best_effort("deregister", lambda conn, _now: deregister_worker(conn, self.worker_id))
        log.info(
            "worker %s stopped: %d claimed, %s; %d released at shutdown",
            self.worker_id,
            self.claimed_total,
            ", ".join(f"{k}={v}" for k, v in sorted(self.outcomes.items())) or "nothing run",
            released,
            extra={
                "action": "worker_stopped",
                "worker_id": self.worker_id,
                "exit_code": self.exit_code,
                "released": released,
            },
        )

    def _best_effort(self, what: str, fn: Callable[[sa.Connection, datetime], object]) -> None:
        try:
            now = self.clock.now()  # before BEGIN: the clock may need its own connection
            with self.engine.begin() as conn:
                fn(conn, now)
        except DB_ERRORS as exc:
            log.warning(
                "%s failed: %s",
                what,
                str(getattr(exc, "orig", exc)).splitlines()[0],
                extra={"action": "shutdown_step_failed"},
            )
