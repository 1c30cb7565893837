"""The chaos driver: workers + receivers + a steady stream of jobs + a seeded fault
schedule, then the checker's verdict and the figures.

Timeline of a run (profile in `tests.chaos.profiles`):

1. set-up: private PostgreSQL (or a SQLite file), schema, chaos tables, webhook
   endpoints, the webhook receiver and SMTP sink, `workers` worker processes;
2. the enqueuer commits jobs at `rate` per second, each with an idempotency key, and
   records an id only once its transaction committed (a failed batch is retried with
   the same keys, so an ambiguous commit cannot add a second job);
3. baseline window (no faults) → fault window (every fault at its seeded time) → after
   window (no faults); a supervisor loop restarts every worker that ended;
4. drain: wait until no job is queued, running or failed; stop the workers;
5. the checker classifies every job; the driver checks the faults really happened and
   prints the figures (faults by kind, throughput before/during/after, recovery time
   to >= 80 % of baseline after each database outage).

Everything random comes from one `random.Random(seed)`: the same seed gives the same
job mix and the same fault schedule (process timing still varies).
"""

from __future__ import annotations

import contextlib
import heapq
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import psycopg
import sqlalchemy as sa

from jobdesk import NewJob, enqueue_many
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.db import make_engine
from jobdesk.shared.core.models import job_attempts, jobs
from jobdesk.shared.core.states import ACTIVE, sql_values
from jobdesk.shared.migrate import upgrade
from jobdesk.shared.settings import Settings
from jobdesk.shared.webhooks.endpoints import add_endpoint
from jobdesk.worker.failpoints import IN_RENEW
from jobdesk.worker.failpoints import NAMES as FAILPOINT_NAMES
from tests.chaos.checker import Planned, Verdict, check
from tests.chaos.fleet import Fleet
from tests.chaos.latency import LatencyRelay
from tests.chaos.netlab import DB_ADDRESS, SUBNET, NetLab
from tests.chaos.partitions import Partitions, finished_since, running_jobs
from tests.chaos.pgserver import DRIVER_APP, PrivatePostgres
from tests.chaos.profiles import Profile
from tests.chaos.receivers import SmtpSink, WebhookReceiver
from tests.chaos.tables import ABORTS, KEY_LIMIT, MAX_ATTEMPTS, metadata
from tests.chaos.workflows import WORKFLOW_CLASSES, Unit, check_units, enqueue_unit
from tests.pgbouncer import PgBouncer

REPO = Path(__file__).resolve().parents[2]
LEASE_SECONDS = 3.0
#: A SIGSTOPped worker stays frozen this long: past its lease, so its jobs are reaped.
STOP_SECONDS = LEASE_SECONDS + 2.5
RESTART_DELAY = 0.3
#: A restarted worker is left alone this long before it may be picked for a fault.
SETTLE_SECONDS = 3.0
TICK = 0.05


@dataclass(order=True)
class Event:
    at: float
    kind: str = field(compare=False)
    arg: Any = field(default=None, compare=False)


@dataclass
class Outage:
    kind: str
    down_at: float
    ready_at: float = 0.0


@dataclass
class Figures:
    faults: Counter[str] = field(default_factory=Counter)
    outages: list[Outage] = field(default_factory=list)
    enqueue_errors: int = 0
    rates: dict[str, float] = field(default_factory=dict)
    recoveries: list[tuple[str, float | None]] = field(default_factory=list)
    elapsed: float = 0.0


class ChaosRun:
    def __init__(
        self,
        profile: Profile,
        seed: int,
        *,
        keep: bool = False,
        out: Callable[[str], None] = print,
    ) -> None:
        self.profile = profile
        self.seed = seed
        self.keep = keep
        self.out = out
        self.rng = random.Random(seed)
        self.workdir = Path(tempfile.mkdtemp(prefix=f"jobdesk-chaos-{profile.name}-"))
        self.pg: PrivatePostgres | None = None
        self.bouncer: PgBouncer | None = None
        self.engine: sa.Engine | None = None
        # On network-namespace hosts the receivers listen on the bridge address: the
        # workers cannot reach this machine's loopback from their namespaces.
        self.lab = NetLab(profile.hosts) if profile.hosts else None
        self.relay: LatencyRelay | None = None
        self.partitions: Partitions | None = None
        self.receiver: WebhookReceiver | None = None
        self.sink: SmtpSink | None = None
        self.fleet: Fleet | None = None
        self.planned: list[Planned] = []
        self.units: list[Unit] = []
        self.planned_lock = threading.Lock()
        self.figures = Figures()
        self.failures: list[str] = []
        self.phase = "setup"
        self.marks: dict[str, float] = {}
        self._enqueue_done = threading.Event()
        self._abort = threading.Event()
        self._admin: Any = None  # the termination loop's own session
        self._loop_terminated = 0

    # ================================================================== set-up
    def _log(self, message: str) -> None:
        start = self.marks.get("start")
        stamp = f"{time.time() - start:7.1f}s" if start else "  setup"
        self.out(f"[chaos {self.profile.name} seed={self.seed} {stamp}] {message}")

    def _setup(self) -> str:
        """Everything the run needs; returns the database URL the workers use."""
        bind = "127.0.0.1"
        if self.lab is not None:
            self.lab.setup()
            bind = DB_ADDRESS
            if self.lab.leftovers:
                self._log(f"removed an earlier run's leftovers: {' '.join(self.lab.leftovers)}")
        self.receiver = WebhookReceiver(random.Random(self.seed + 1), bind)
        self.sink = SmtpSink(bind)
        if self.profile.backend == "postgresql":
            network = (DB_ADDRESS, SUBNET) if self.lab is not None else None
            settings = {"max_connections": str(self.profile.max_connections)}
            self.pg = PrivatePostgres(network=network, settings=settings).setup()
            url = self.pg.url
            if self.lab is not None:
                self._setup_partitions(self.lab, self.pg)
        else:
            url = f"sqlite:///{self.workdir / 'chaos.db'}"
        settings = Settings(db_connect_timeout_seconds=2.0, db_statement_timeout_seconds=60.0)
        self.engine = make_engine(url, settings=settings, pool_size=4, application_name=DRIVER_APP)
        upgrade(self.engine)
        metadata.create_all(self.engine)
        self.receiver.start()
        self.sink.start()
        with self.engine.begin() as conn:
            now = db_now(conn)
            for name, path in (("sink", "/hook"), ("reject", "/reject")):
                secret = add_endpoint(
                    conn, name, self.receiver.url(path), allow_private=True, now=now
                )
                self.receiver.secrets.append(secret)
        if self.profile.via_pgbouncer:
            # The workers go through PgBouncer (transaction pooling) and LISTEN on a
            # direct connection; the driver's own checks stay direct.
            assert self.pg is not None
            self.bouncer = PgBouncer(
                "127.0.0.1", self.pg.port, users=("postgres",), default_pool_size=20
            ).start()
            return self.bouncer.url_for(url)
        return url

    def _setup_partitions(self, lab: NetLab, pg: PrivatePostgres) -> None:
        p = self.profile
        if p.degraded_hosts and not lab.netem:
            self.relay = LatencyRelay(DB_ADDRESS, ("127.0.0.1", pg.port), seed=self.seed).start()
        self.partitions = Partitions(
            lab,
            hosts=p.hosts,
            cuts=p.cuts,
            one_way_cuts=p.one_way_cuts,
            degraded_hosts=p.degraded_hosts,
            skewed_hosts=p.skewed_hosts,
            cut_seconds=p.cut_seconds,
            # lease + a leader hand-over (the cut host may have led) + the new leader's
            # hold-back (1.5 heartbeats) + two reaper intervals + scheduling slack
            rescue_limit=LEASE_SECONDS + 2.0 + 1.5 + 2 * 0.5 + 2.0,
            # TCP's retransmission back-off after a 9 s silence + the chaos jobs' 10 s
            # timeout (a claim answered only after the heal holds its slot that long)
            resume_limit=30.0,
            relay=self.relay,
        )

    def _worker_env(self, url: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("JOBDESK_")}
        env.update(
            {
                "JOBDESK_DATABASE_URL": url,
                "JOBDESK_JOB_MODULES": "tests.chaos.jobmods",
                "JOBDESK_LEASE_SECONDS": str(LEASE_SECONDS),
                "JOBDESK_HEARTBEAT_SECONDS": "1",
                "JOBDESK_REAPER_INTERVAL_SECONDS": "0.5",
                "JOBDESK_LEADER_LEASE_SECONDS": "2",
                "JOBDESK_POLL_INTERVAL_SECONDS": "0.1",
                "JOBDESK_SHUTDOWN_TIMEOUT_SECONDS": "2",
                "JOBDESK_DB_CONNECT_TIMEOUT_SECONDS": "2",
                "JOBDESK_DB_STATEMENT_TIMEOUT_SECONDS": "10",
                "JOBDESK_DB_POOL_SIZE": str(self.profile.concurrency),
                # The sink has no TLS; off loopback (namespace hosts) STARTTLS would be
                # required, so it is switched off for this private sink.
                "JOBDESK_SMTP_URL": f"{self.sink.url}?timeout=2"
                + ("&starttls=off" if self.lab is not None else ""),
                "JOBDESK_SMTP_TIMEOUT_SECONDS": "2",
                "JOBDESK_MAIL_FROM": "chaos@example.com",
                "JOBDESK_EMAIL_TEMPLATES_DIR": str(Path(__file__).parent / "email_templates"),
                "JOBDESK_ALLOW_PRIVATE_WEBHOOK_TARGETS": "1",
                "JOBDESK_WEBHOOK_CONNECT_TIMEOUT_SECONDS": "1",
                "JOBDESK_WEBHOOK_TIMEOUT_SECONDS": "1",
                "JOBDESK_WEBHOOK_RETRY_AFTER_CAP_SECONDS": "1",
                "JOBDESK_SMTP_RATE_LIMIT": "100000/s",
                "JOBDESK_WEBHOOK_RATE_LIMIT": "100000/s",
                "JOBDESK_BREAKER_THRESHOLD": "10",
                "JOBDESK_BREAKER_COOLDOWN_SECONDS": "0.5",
                "JOBDESK_PAUSED_RECHECK_SECONDS": "1",
                "JOBDESK_LOG_LEVEL": "info",
                "PYTHONUNBUFFERED": "1",
            }
        )
        if self.bouncer is not None and self.pg is not None:
            env["JOBDESK_PGBOUNCER"] = "1"
            env["JOBDESK_LISTEN_URL"] = self.pg.url
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        return env

    # ================================================================== jobs
    def _new_job(self, index: int) -> tuple[NewJob, bool]:
        """The index-th job of this seed (deterministic, so a retried batch is identical)."""
        rng = random.Random(self.seed * 1_000_003 + index)
        key = f"chaos-{self.seed}-{index}"
        ms = rng.randint(5, 150)
        pick = rng.random()
        attempts = MAX_ATTEMPTS
        if pick < 0.30:
            dies = rng.random() < 0.03
            group = f"g{rng.randint(0, 9)}" if rng.random() < 0.2 else None
            payload: dict[str, Any] = {"key": key, "ms": ms, "die": dies}
            kind = "chaos.async_effect" if rng.random() < 0.4 else "chaos.effect"
            spec = NewJob(kind, payload, group_key=group)
            if group is None and rng.random() < 0.3:
                # A few tenants share their keys' slots across the whole fleet.
                spec = NewJob(
                    "chaos.keyed_effect", payload, concurrency_key=f"tenant{rng.randint(0, 3)}"
                )
        elif pick < 0.45:
            dies = rng.random() < 0.02
            spec = NewJob("chaos.once_db", {"key": key, "ms": ms, "die": dies})
        elif pick < 0.57:
            dies = rng.random() < 0.02
            kind = "chaos.async_once" if rng.random() < 0.5 else "chaos.once"
            spec = NewJob(kind, {"key": key, "ms": ms, "die": dies})
        elif pick < 0.74:
            dies = False
            spec = NewJob(
                "email.send",
                {"to": f"c{index}@example.com", "template": "chaos", "event_id": key},
            )
        elif pick < 0.985:
            dies = rng.random() < 0.03
            endpoint = "reject" if dies else "sink"
            spec = NewJob(
                "webhook.deliver",
                {"endpoint": endpoint, "event": "chaos.event", "data": {"key": key}},
            )
        else:
            # SystemExit, KeyboardInterrupt or an unprintable exception: every attempt
            # fails, so with two attempts the job must end dead (never stuck running).
            dies, attempts = True, 2
            how = rng.choice(ABORTS)
            spec = NewJob("chaos.abort", {"key": key, "ms": ms, "how": how})
        spec = NewJob(
            spec.job_type,
            spec.payload,
            group_key=spec.group_key,
            concurrency_key=spec.concurrency_key,
            idempotency_key=key,
            max_attempts=attempts,
        )
        return spec, dies

    def _enqueuer(self) -> None:
        assert self.engine is not None
        # As an app does, the enqueuer imports the job module, so its jobs carry their
        # types' options (the keyed type's limit) even before a worker published them.
        # Here, not at the top: a test process that only imports the driver keeps the
        # built-in types' real retry policies (the module gives them fast ones).
        import tests.chaos.jobmods  # noqa: F401

        total, rate = self.profile.jobs, self.profile.rate
        start = self.marks["start"]
        done = 0
        while done < total and not self._abort.is_set():
            due = min(total, int((time.time() - start) * rate) + 1)
            if done >= due:
                time.sleep(0.02)
                continue
            indexes = range(done, min(due, done + 200))
            specs = [self._new_job(i) for i in indexes]
            try:
                with self.engine.begin() as conn:
                    ids = enqueue_many(conn, [spec for spec, _ in specs])
            except sa.exc.DBAPIError:
                # Committed or not, we cannot tell: the retry carries the same keys and
                # gets the existing ids back if it did.
                self.figures.enqueue_errors += 1
                time.sleep(0.2)
                continue
            with self.planned_lock:
                for (spec, dies), job_id in zip(specs, ids, strict=True):
                    assert spec.idempotency_key is not None
                    self.planned.append(Planned(spec.idempotency_key, job_id, spec.job_type, dies))
            every = self.profile.workflows
            for index in indexes if every else ():
                if index % every == 0 and not self._enqueue_unit(index):
                    break
            done += len(specs)
        self.marks["enqueued"] = time.time()
        self._enqueue_done.set()

    def _enqueue_unit(self, index: int) -> bool:
        """One workflow unit, retried (found by its key) while the database is away."""
        assert self.engine is not None
        key = f"chaos-{self.seed}-wf{index}"
        ms = random.Random(self.seed * 1_000_003 + index).randint(5, 60)
        while not self._abort.is_set():
            try:
                unit = enqueue_unit(self.engine, key, ms)
            except sa.exc.DBAPIError:
                self.figures.enqueue_errors += 1
                time.sleep(0.2)
                continue
            with self.planned_lock:
                self.units.append(unit)
                self.planned.extend(unit.planned())
            return True
        return False

    # ================================================================== schedule
    def _schedule(self) -> list[Event]:
        p, rng = self.profile, self.rng
        start = p.baseline
        window = p.fault_window
        events: list[Event] = [Event(start, "faults_on"), Event(start + window, "faults_off")]
        outages = (
            ["pg_fast"] * p.pg_fast_restarts
            + ["pg_immediate"] * p.pg_immediate_restarts
            + ["pause"] * p.pauses
        )
        rng.shuffle(outages)
        for n, kind in enumerate(outages):
            # Evenly spaced so each outage's recovery is measured on its own.
            slot = window / len(outages)
            at = start + slot * n + slot * rng.uniform(0.15, 0.35)
            events.append(Event(at, kind))
        # Faults on workers and receivers end a little before the window closes, so
        # every one of them has happened when the after window starts.
        usable = window - STOP_SECONDS - 2
        events += [Event(start + rng.uniform(1, usable), "kill") for _ in range(p.kills)]
        events += [Event(start + rng.uniform(1, usable), "stop") for _ in range(p.stops)]
        events += [
            Event(start + rng.uniform(1, usable), "terminate") for _ in range(p.terminations)
        ]
        for _ in range(p.receiver_faults):
            target = rng.choice(["webhook", "webhook", "smtp"])
            mode = rng.choice(
                ["slow", "failing", "resetting"] if target == "webhook" else ["tempfail", "drop"]
            )
            events.append(Event(start + rng.uniform(1, usable), "receiver", (target, mode)))
        # Connection exhaustion early in the window, the termination loop later: one at a
        # time, so the loop can reach the server and each recovery is measured alone.
        for n in range(p.exhaustions):
            at = start + window * (0.1 + 0.4 * n / max(1, p.exhaustions))
            events.append(Event(at, "exhaust"))
        for n in range(p.termination_loops):
            at = start + window * (0.55 + 0.4 * n / max(1, p.termination_loops))
            events.append(Event(at, "terminate_loop"))
        if self.partitions is not None:
            for at, kind, arg in self.partitions.schedule(start, window):
                events.append(Event(at, kind, arg))
        heapq.heapify(events)
        return events

    def _arming(self) -> str | None:
        # Not `in_renew`: it is hit by every heartbeat, work or not, so an armed worker
        # would crash seconds after each start (often still starting when the window
        # closes and it is asked to stop); `tests/worker/test_frozen_heartbeat.py` uses it.
        name = self.rng.choice(sorted(FAILPOINT_NAMES - {IN_RENEW}))
        hit = self.rng.randint(1, 4)
        if self._behind_on_crashes():
            # Half the window gone and fewer crashes than planned: crash at the first hit,
            # or a slow stretch (outages, few jobs of the armed kind) leaves the run
            # short of its planned faults — a run that proves nothing about them.
            hit = 1
        return f"{name}:#{hit}"

    def _behind_on_crashes(self) -> bool:
        assert self.fleet is not None
        started = self.marks.get("faults_on")
        if started is None:
            return False
        half_gone = time.time() - started >= self.profile.fault_window / 2
        return half_gone and sum(self.fleet.failpoints.values()) < self.profile.failpoint_crashes

    def _want_armed(self, index: int) -> bool:
        assert self.fleet is not None
        target = self.profile.failpoint_crashes + max(2, self.profile.failpoint_crashes // 4)
        return (
            self.phase == "faults"
            and index < self.profile.armed_slots
            and sum(self.fleet.failpoints.values()) < target
        )

    def _victim(self) -> int | None:
        """A worker that is up and working, unarmed and not stopped (faults never hit
        armed workers, and a worker still importing its modules holds no jobs yet)."""
        assert self.fleet is not None
        settled = time.monotonic() - SETTLE_SECONDS
        choices = [
            s.index
            for s in self.fleet.slots
            if self.fleet.alive(s.index)
            and not s.armed
            and not s.stopped
            and s.started_at < settled
        ]
        return self.rng.choice(choices) if choices else None

    # ================================================================== main loop
    def _fire(self, event: Event, events: list[Event]) -> None:
        fleet, faults = self.fleet, self.figures.faults
        assert fleet is not None
        now = time.time() - self.marks["start"]
        if event.kind == "faults_on":
            self.phase = "faults"
            self.marks["faults_on"] = time.time()
            self._log("fault window opens")
            for index in range(self.profile.armed_slots):
                fleet.terminate(index)  # graceful restart, then armed (supervisor below)
        elif event.kind == "faults_off":
            self.phase = "after"
            self.marks["faults_off"] = time.time()
            self._log("fault window closes")
            for slot in fleet.slots:
                fleet.cont(slot.index)
                if slot.armed and fleet.alive(slot.index):
                    fleet.terminate(slot.index)
        elif event.kind == "kill":
            victim = self._victim()
            if victim is None:
                heapq.heappush(events, Event(now + 0.5, "kill"))
            elif fleet.kill(victim):
                self._log(f"SIGKILL worker {victim}")
        elif event.kind == "stop":
            victim = self._victim()
            if victim is None:
                heapq.heappush(events, Event(now + 0.5, "stop"))
            elif fleet.stop(victim):
                self._log(f"SIGSTOP worker {victim} for {STOP_SECONDS}s")
                heapq.heappush(events, Event(now + STOP_SECONDS, "cont", victim))
        elif event.kind == "cont":
            fleet.cont(event.arg)
            self._log(f"SIGCONT worker {event.arg}")
        elif event.kind == "terminate":
            assert self.pg is not None
            try:
                # While the database is frozen this cannot connect: try again later.
                count = -1 if self.pg.paused else self.pg.terminate_backends()
            except psycopg.Error:
                count = -1
            if count < 0:
                heapq.heappush(events, Event(now + 1.0, "terminate"))
                return
            self._log(f"pg_terminate_backend: {count} sessions")
            if count:
                faults["backends terminated"] += 1
            else:
                heapq.heappush(events, Event(now + 0.5, "terminate"))
        elif event.kind in ("exhaust", "exhaust_end", "terminate_loop", "terminate_tick"):
            self._database_fault(event, events, now)
        elif event.kind in ("degrade", "restore", "cut", "heal", "stranded"):
            self._partition(event, events, now)
        elif event.kind == "receiver":
            target, mode = event.arg
            seconds = self.rng.uniform(3, 6)
            (self.receiver if target == "webhook" else self.sink).set_mode(mode)
            faults[f"{target} receiver {mode}"] += 1
            self._log(f"{target} receiver {mode} for {seconds:.1f}s")
            heapq.heappush(events, Event(now + seconds, "receiver_ok", target))
        elif event.kind == "receiver_ok":
            (self.receiver if event.arg == "webhook" else self.sink).set_mode("ok")
        elif event.kind in ("pg_fast", "pg_immediate", "pause"):
            assert self.pg is not None
            if self.pg.paused:  # one outage at a time
                heapq.heappush(events, Event(now + 1.0, event.kind))
                return
            self._outage(event.kind, events, now)
        elif event.kind == "resume":
            assert self.pg is not None
            self.pg.resume()
            outage = event.arg
            outage.ready_at = self.pg.wait_accepting()
            self._log("database resumed")

    def _partition(self, event: Event, events: list[Event], now: float) -> None:
        parts, fleet, engine = self.partitions, self.fleet, self.engine
        assert parts is not None
        assert fleet is not None
        assert engine is not None
        if event.kind == "degrade":
            parts.degrade()
            parts.sample_skews(engine, fleet)
            self._log(f"hosts {parts.degraded}: 1% loss each way, 50 ms +- 20 ms delay")
        elif event.kind == "restore":
            parts.restore()
            self._log(f"hosts {parts.degraded}: link restored")
        elif event.kind == "cut":
            cut = event.arg
            busy = parts.settling(
                cut.host, lambda since: finished_since(engine, fleet, cut.host, since)
            )
            log = fleet.slots[cut.host].log
            if busy or not parts.cut(cut, lambda h: running_jobs(engine, fleet, h), log):
                heapq.heappush(events, Event(now + 0.2, "cut", cut))
                return
            self.figures.faults[f"partition: {cut.kind}"] += 1
            self._log(f"host {cut.host}: {cut.kind} (holding {cut.held} jobs)")
            heapq.heappush(events, Event(now + self.profile.cut_seconds, "heal", cut))
            heapq.heappush(events, Event(now + 1.0, "stranded", cut))
        elif event.kind == "stranded":
            # What the database still sees running on the host a second into the cut:
            # those jobs can only end by a rescue (or, one way, by a late completion).
            held = running_jobs(engine, fleet, event.arg.host)
            if held < 0:
                heapq.heappush(events, Event(now + 0.2, "stranded", event.arg))
                return
            event.arg.stranded = held
        elif event.kind == "heal":
            parts.heal(event.arg)
            parts.sample_skews(engine, fleet)
            self._log(f"host {event.arg.host}: healed")

    def _database_fault(self, event: Event, events: list[Event], now: float) -> None:
        """Connection exhaustion and the backend-termination loop (see `profiles`)."""
        pg, p, faults = self.pg, self.profile, self.figures.faults
        assert pg is not None
        if event.kind == "exhaust":
            if pg.paused:
                heapq.heappush(events, Event(now + 1.0, "exhaust"))
                return
            # Not an outage measured for recovery: the database stays up, and the workers'
            # throughput is the enqueue rate before and after (nothing to catch up).
            # Every slot taken, then the workers' sessions ended and their slots taken
            # too: for the window, no worker can open a connection.
            pg.exhaust()
            ended = pg.terminate_backends(pg.hog())
            held = pg.exhaust()
            faults["connection exhaustion"] += 1
            self._log(
                f"max_connections exhausted: {held} idle sessions for {p.exhaustion_seconds}s "
                f"({ended} worker sessions ended first)"
            )
            heapq.heappush(events, Event(now + p.exhaustion_seconds, "exhaust_end"))
        elif event.kind == "exhaust_end":
            pg.release()
            pg.wait_accepting()
            self._log("connection slots free again")
        elif event.kind == "terminate_loop":
            if pg.paused:
                heapq.heappush(events, Event(now + 1.0, "terminate_loop"))
                return
            self._admin = pg.admin_connection()
            self._loop_terminated = 0
            faults["backend termination loop"] += 1
            self._log(
                f"terminating every worker backend every {p.termination_period}s for "
                f"{p.termination_loop_seconds}s"
            )
            ends = now + p.termination_loop_seconds
            heapq.heappush(events, Event(now, "terminate_tick", ends))
        elif event.kind == "terminate_tick":
            ends = event.arg
            if now < ends:
                with contextlib.suppress(psycopg.Error):
                    self._loop_terminated += pg.terminate_backends(self._admin)
                heapq.heappush(
                    events, Event(now + p.termination_period, "terminate_tick", event.arg)
                )
                return
            with contextlib.suppress(psycopg.Error):
                self._admin.close()
            self._log(f"termination loop over: {self._loop_terminated} sessions terminated")

    def _outage(self, kind: str, events: list[Event], now: float) -> None:
        assert self.pg is not None
        faults = self.figures.faults
        outage = Outage(kind, time.time())
        self.figures.outages.append(outage)
        if kind == "pause":
            count = self.pg.pause()
            faults["database paused"] += 1
            self._log(f"SIGSTOP database ({count} processes) for {self.profile.pause_seconds}s")
            heapq.heappush(events, Event(now + self.profile.pause_seconds, "resume", outage))
            return
        if kind == "pg_fast":
            self.pg.restart_fast()
            faults["database restart (fast)"] += 1
        else:
            self.pg.restart_immediate()
            faults["database restart (immediate)"] += 1
        outage.ready_at = self.pg.wait_accepting()
        self._log(f"database {kind}: down {outage.ready_at - outage.down_at:.1f}s")

    def _supervise(self, restarts: list[tuple[float, int]]) -> None:
        fleet = self.fleet
        assert fleet is not None
        for index, what in fleet.reap():
            if what.startswith(("failpoint", "unexpected", "stuck")):
                self._log(f"worker {index}: {what}")
            restarts.append((time.monotonic() + RESTART_DELAY, index))
        keep = []
        for due, index in restarts:
            if time.monotonic() < due or self.phase == "stopping":
                keep.append((due, index))
                continue
            if not fleet.alive(index):
                fleet.start(index, armed=self._arming() if self._want_armed(index) else None)
        restarts[:] = keep if self.phase != "stopping" else []

    def _pending_jobs(self) -> int:
        assert self.engine is not None
        try:
            with self.engine.connect() as conn:
                return int(
                    conn.execute(
                        sa.select(sa.func.count())
                        .select_from(jobs)
                        .where(jobs.c.status.in_([*sql_values(ACTIVE), "waiting"]))
                    ).scalar_one()
                )
        except sa.exc.DBAPIError:
            return -1

    def _loop(self) -> None:
        events = self._schedule()
        restarts: list[tuple[float, int]] = []
        start = self.marks["start"]
        drain_deadline: float | None = None
        next_probe = 0.0
        while not self._abort.is_set():
            now = time.time() - start
            while events and events[0].at <= now:
                self._fire(heapq.heappop(events), events)
            self._supervise(restarts)
            if self._enqueue_done.is_set() and not events:
                if drain_deadline is None:
                    drain_deadline = time.monotonic() + self.profile.drain
                    self.phase = "drain"
                    self._log("all jobs enqueued; draining")
                if time.monotonic() >= next_probe:
                    next_probe = time.monotonic() + 0.5
                    if self._pending_jobs() == 0:
                        self._log("drained")
                        return
                if time.monotonic() > drain_deadline:
                    self._log(f"drain timed out after {self.profile.drain}s")
                    return
            time.sleep(TICK)

    # ================================================================== run
    def run(self) -> bool:
        started = time.monotonic()
        previous = signal.signal(signal.SIGTERM, _raise_exit)
        try:
            url = self._setup()
            self.fleet = Fleet(
                env=self._worker_env(url),
                workdir=self.workdir,
                size=self.profile.workers,
                concurrency=self.profile.concurrency,
                cwd=REPO,
            )
            self._log(
                f"{self.profile.jobs} jobs at {self.profile.rate:g}/s on {self.profile.backend}"
                f"{' through PgBouncer' if self.bouncer else ''}; "
                f"{self.profile.workers} workers x {self.profile.concurrency}; work dir "
                f"{self.workdir}"
            )
            if self.partitions is not None:
                assert self.pg is not None
                self.fleet.launch = self.partitions.launch(self.pg.url_at)
            for slot in self.fleet.slots:
                self.fleet.start(slot.index)
            self.marks["start"] = time.time()
            enqueuer = threading.Thread(target=self._enqueuer, name="chaos-enqueuer", daemon=True)
            enqueuer.start()
            self._loop()
            self.phase = "stopping"
            self.fleet.shutdown()
            self.fleet.reap()
            enqueuer.join(5)
            verdict = self._verdict()
        except BaseException:
            self._abort.set()
            raise
        finally:
            signal.signal(signal.SIGTERM, previous)
            self.figures.elapsed = time.monotonic() - started
            self._teardown()
        if self.figures.elapsed > self.profile.budget:
            self.failures.append(
                f"run took {self.figures.elapsed:.0f}s; the {self.profile.name} budget is "
                f"{self.profile.budget:.0f}s"
            )
        self._report(verdict)
        return verdict.passed and not self.failures

    def _verdict(self) -> Verdict:
        assert self.engine is not None
        assert self.fleet is not None
        with self.planned_lock:
            planned = list(self.planned)
        if len(planned) < self.profile.jobs:
            self.failures.append(f"only {len(planned)} of {self.profile.jobs} jobs enqueued")
        verdict = check(self.engine, planned, self.receiver, self.sink)
        with self.planned_lock:
            check_units(self.engine, list(self.units), verdict)
        for job_class, count in verdict.classes.items():
            if job_class in WORKFLOW_CLASSES and count:
                verdict.failures.append(
                    f"{count} {job_class}: " + "; ".join(verdict.examples[job_class])
                )
        self._throughput()
        self._count_faults(verdict)
        if self.partitions is not None:
            self.failures.extend(self.partitions.evaluate(self.engine, self.fleet))
        return verdict

    def _count_faults(self, verdict: Verdict) -> None:
        fleet, p, faults = self.fleet, self.profile, self.figures.faults
        assert fleet is not None
        faults["worker SIGKILL"] = fleet.kills
        faults["worker SIGSTOP past lease"] = fleet.stops
        for name, count in fleet.failpoints.items():
            faults[f"failpoint {name}"] = count
        faults["graceful restarts (SIGTERM)"] = fleet.graceful
        crashes = sum(fleet.failpoints.values())
        wanted = {
            "worker SIGKILL": (fleet.kills, p.kills),
            "failpoint crashes": (crashes, p.failpoint_crashes),
            "worker SIGSTOP past lease": (fleet.stops, p.stops),
            "database restart (fast)": (faults["database restart (fast)"], p.pg_fast_restarts),
            "database restart (immediate)": (
                faults["database restart (immediate)"],
                p.pg_immediate_restarts,
            ),
            "database paused": (faults["database paused"], p.pauses),
            "backends terminated": (faults["backends terminated"], p.terminations),
            "connection exhaustion": (faults["connection exhaustion"], p.exhaustions),
            "backend termination loop": (
                faults["backend termination loop"],
                p.termination_loops,
            ),
            "partition: link down": (faults["partition: link down"], p.cuts),
            "partition: one-way": (
                sum(n for k, n in faults.items() if k.startswith("partition: drop")),
                p.one_way_cuts,
            ),
            "receiver faults": (
                sum(n for k, n in faults.items() if "receiver" in k),
                p.receiver_faults,
            ),
        }
        for what, (done, planned) in wanted.items():
            if done < planned:
                self.failures.append(f"planned {planned} x {what}, only {done} happened")
        if fleet.unexpected:
            self.failures.extend(fleet.unexpected)
        if (fleet.kills or crashes) and not verdict.lost_attempts:
            self.failures.append("workers died holding jobs, yet the reaper rescued none")

    def _throughput(self) -> None:
        assert self.engine is not None
        with self.engine.connect() as conn:
            times = sorted(
                row[0].timestamp()
                for row in conn.execute(
                    sa.select(job_attempts.c.finished_at).where(
                        job_attempts.c.outcome == "succeeded"
                    )
                )
            )
        marks, rates = self.marks, self.figures.rates

        def rate(lo: float, hi: float) -> float:
            if hi <= lo:
                return 0.0
            return sum(1 for t in times if lo <= t < hi) / (hi - lo)

        start = marks["start"]
        settled = start + self.profile.baseline / 2  # after the start-up backlog
        baseline = rate(settled, marks.get("faults_on", settled))
        rates["baseline"] = baseline
        rates["during faults"] = rate(marks.get("faults_on", 0), marks.get("faults_off", 0))
        rates["after faults"] = rate(marks.get("faults_off", 0), marks.get("enqueued", 0))
        for outage in self.figures.outages:
            took = _recovery(times, outage.ready_at, 0.8 * baseline) if outage.ready_at else None
            self.figures.recoveries.append((outage.kind, took))
            if took is None or took > self.profile.recovery_limit:
                ready = outage.ready_at
                per_second = [
                    sum(1 for t in times if ready + k <= t < ready + k + 1) for k in range(-2, 16)
                ]
                self.failures.append(
                    f"after {outage.kind}: throughput back to 80% of baseline "
                    f"{'never' if took is None else f'after {took:.1f}s'} "
                    f"(limit {self.profile.recovery_limit:g}s); jobs/s from 2 s before the "
                    f"database was ready: {per_second}"
                )
        with (self.workdir / "timeline.csv").open("w") as timeline:
            timeline.write("second,succeeded\n")
            counts = Counter(int(t - start) for t in times)
            for second in range(int(times[-1] - start) + 1 if times else 0):
                timeline.write(f"{second},{counts[second]}\n")

    def _teardown(self) -> None:
        if self.fleet is not None:
            with contextlib.suppress(Exception):
                self.fleet.force_kill_all()
        for outside in (self.receiver, self.sink, self.relay):
            if outside is not None:
                with contextlib.suppress(Exception):
                    outside.stop()
        if self.engine is not None:
            self.engine.dispose()
        if self.bouncer is not None:
            self.bouncer.stop()
        if self.pg is not None:
            self.pg.teardown()
        if self.lab is not None:
            self.lab.teardown()
        if not self.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # ================================================================== figures
    def _report(self, verdict: Verdict) -> None:
        p, fig = self.profile, self.figures
        lines = [
            f"== chaos {p.name} seed={self.seed}: "
            f"{'PASS' if verdict.passed and not self.failures else 'FAIL'} "
            f"in {fig.elapsed:.0f}s ==",
            f"jobs: {len(self.planned)} enqueued ({fig.enqueue_errors} enqueue batches retried)",
        ]
        for job_class, count in sorted(verdict.classes.items(), key=lambda kv: -kv[1]):
            lines.append(f"  {job_class:<38} {count}")
        lines.append(
            f"attempts: {verdict.attempts_total} in all, {verdict.lost_attempts} rescued by "
            "the reaper (worker lost)"
        )
        total = sum(n for k, n in fig.faults.items() if not k.startswith("graceful"))
        lines.append(f"faults: {total}")
        for kind, count in sorted(fig.faults.items()):
            lines.append(f"  {kind:<38} {count}")
        lost = verdict.classes["lost"]
        stuck = verdict.classes["stuck running"] + verdict.classes["unfinished"]
        double = verdict.classes["effect applied twice"] + verdict.classes["completed twice"]
        lines.append(f"lost: {lost}  stuck: {stuck}  applied twice: {double}")
        if self.units:
            shown = "  ".join(f"{name}: {verdict.classes[name]}" for name in WORKFLOW_CLASSES)
            lines.append(f"workflows: {len(self.units)} batches + after= chains; {shown}")
        lines.append(
            f"doubled same-database effects: {verdict.doubled_effects}  attempts spent by "
            f"database trouble: {verdict.db_attempts} (handlers' own database work failed "
            f"{verdict.handler_db_attempts})"
        )
        if verdict.keyed_peaks:
            peaks = ", ".join(f"{key} {peak}" for key, peak in sorted(verdict.keyed_peaks.items()))
            lines.append(f"keyed jobs, most running at once per key (limit {KEY_LIMIT}): {peaks}")
        lines.append(
            "throughput (jobs/s): " + ", ".join(f"{k} {v:.1f}" for k, v in fig.rates.items())
        )
        for kind, took in fig.recoveries:
            shown = "never" if took is None else f"{took:.1f}s"
            lines.append(f"  recovery to >= 80% of baseline after {kind}: {shown}")
        if self.partitions is not None:
            lines.extend(self.partitions.report())
        for failure in [*verdict.failures, *self.failures]:
            lines.append(f"FAILURE: {failure}")
        if self.keep:
            lines.append(f"work dir kept: {self.workdir}")
        self.out("\n".join(lines))


def _recovery(
    times: list[float], ready_at: float, target: float, step: float = 0.1
) -> float | None:
    """Seconds from `ready_at` to the end of the first 1 s window at >= `target` jobs/s."""
    import bisect

    t = ready_at
    end = times[-1] if times else ready_at
    while t <= end:
        count = bisect.bisect_left(times, t + 1.0) - bisect.bisect_left(times, t)
        if count >= target:
            return t + 1.0 - ready_at
        t += step
    return None


def _raise_exit(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def run_profile(profile: Profile, seed: int, *, keep: bool = False) -> bool:
    def out(line: str) -> None:
        print(line, flush=True)
        sys.stdout.flush()

    return ChaosRun(profile, seed, keep=keep, out=out).run()
