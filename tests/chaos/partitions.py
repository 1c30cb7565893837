"""Partition faults of a chaos run whose workers live on network-namespace hosts, and
what each one must show afterwards.

Host roles (profile `hosts` = N, one worker per host, `tests.chaos.netlab`):

- the last `skewed_hosts` hosts run their worker under libfaketime an hour ahead
  (`FAKETIME=+1h`, Debian's `faketime` package): leases and claims follow the database
  clock (`jobdesk.shared.core.clock.DatabaseClock`), so the host must work normally and
  report a skew of about 3,600 s;
- the `degraded_hosts` before them get 1 % loss each way and 50 ms ± 20 ms delay for
  the whole fault window (`NetLab.degrade`; the delay from `LatencyRelay` where the
  kernel has no netem) and must keep finishing jobs;
- the others take turns being cut off: `cuts` link-down cuts and `one_way_cuts`
  asymmetric ones (database→host dropped, then host→database), each `cut_seconds`
  long — past the lease — and then healed. A cut waits (up to 5 s) for its host to
  hold a running job so there is something to rescue, and a host's next cut waits until
  it finished a job after its previous heal (up to `resume_limit`).

Per cut, expected and checked: the host held jobs and the other hosts rescued them
(`lost` attempts of that host's worker) within lease + leader hand-over + hold-back
(`rescue_limit`) of the cut — or of the claim, when a claim still reached the database
during a one-way cut (a database→host drop may need no rescue at all: the host's
completions still get through); the host's worker was not restarted and finished jobs again after
the heal (`resume_limit`). A link-down cut resumes slowest: the host's connections
wait for TCP's next retransmission, and jobs whose claim answer arrived only after the
heal hold their slots until their own timeout ends them (their leases are gone, so
what they report is fenced). Late completions it reports for rescued jobs are
fenced (counted from its log); the checker proves that none was applied twice.
"""

from __future__ import annotations

import glob
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.models import job_attempts, jobs, workers
from tests.chaos.fleet import Fleet
from tests.chaos.latency import LatencyRelay
from tests.chaos.netlab import DB_ADDRESS, NetLab

SKEW = "+1h"
SKEW_SECONDS = 3600.0
HOLD_WAIT = 5.0
_FENCED = re.compile(r"-> fenced")
_WORKER_PID = re.compile(r":(\d+):[0-9a-f]+$")


def libfaketime() -> str | None:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    return found[0] if found else None


@dataclass
class Cut:
    kind: str  # "link down", "drop database->host", "drop host->database"
    host: int
    at: float = 0.0  # wall-clock time the cut began
    healed_at: float = 0.0
    held: int = 0  # running jobs of the host when it was cut
    stranded: int = 0  # ... still running one second into the cut: they need a rescue
    rescued: int = 0
    first_rescue: float | None = None  # seconds after the cut
    last_rescue: float | None = None
    slowest: float | None = None  # longest rescue, from the cut or the job's later claim
    resumed: float | None = None  # seconds after the heal to the host's next finished job
    fenced: int = 0
    log_offset: int = 0  # the host's worker log size when the cut began


@dataclass
class Partitions:
    lab: NetLab
    hosts: int
    cuts: int
    one_way_cuts: int
    degraded_hosts: int
    skewed_hosts: int
    cut_seconds: float
    rescue_limit: float
    resume_limit: float
    relay: LatencyRelay | None = None
    done: list[Cut] = field(default_factory=list)
    degraded_since: float = 0.0
    degraded_until: float = 0.0
    skews: dict[int, float] = field(default_factory=dict)
    finished: dict[int, int] = field(default_factory=dict)  # host -> jobs it succeeded
    _waiting_since: dict[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.cut_hosts == [] and (self.cuts or self.one_way_cuts):
            raise ValueError("no host left to cut: every host is degraded or skewed")

    # ------------------------------------------------------------------ roles
    @property
    def skewed(self) -> list[int]:
        return list(range(self.hosts - self.skewed_hosts, self.hosts))

    @property
    def degraded(self) -> list[int]:
        first = self.hosts - self.skewed_hosts - self.degraded_hosts
        return list(range(first, self.hosts - self.skewed_hosts))

    @property
    def cut_hosts(self) -> list[int]:
        return list(range(self.hosts - self.skewed_hosts - self.degraded_hosts))

    def launch(
        self, db_url: Callable[[str, int | None], str]
    ) -> Callable[[int, list[str], dict[str, str]], tuple[list[str], dict[str, str]]]:
        """The fleet's launch hook: worker i runs on host i (its namespace), through the
        latency relay if it is degraded, an hour ahead if it is skewed."""

        def launch(
            index: int, command: list[str], env: dict[str, str]
        ) -> tuple[list[str], dict[str, str]]:
            host = index % self.hosts
            env = dict(env)
            if host in self.degraded and self.relay is not None:
                env["JOBDESK_DATABASE_URL"] = db_url(*self.relay.address)
            else:
                env["JOBDESK_DATABASE_URL"] = db_url(DB_ADDRESS, None)
            if host in self.skewed:
                library = libfaketime()
                if library is None:
                    raise RuntimeError("libfaketime not found (Debian package faketime)")
                # Monotonic time is shifted too (a constant offset, harmless): with
                # FAKETIME_DONT_FAKE_MONOTONIC libfaketime makes every time.sleep() fail
                # with EINVAL.
                env.update(LD_PRELOAD=library, FAKETIME=SKEW)
            return self.lab.command(host, command), env

        return launch

    # ------------------------------------------------------------------ schedule
    def schedule(self, start: float, window: float) -> list[tuple[float, str, Any]]:
        """(at, kind, arg) events: the degraded window and the cuts, evenly spaced."""
        events: list[tuple[float, str, Any]] = []
        if self.degraded:
            events += [(start + 0.5, "degrade", None), (start + window - 1.0, "restore", None)]
        kinds = ["link down"] * self.cuts
        for n in range(self.one_way_cuts):
            kinds.append("drop database->host" if n % 2 == 0 else "drop host->database")
        targets = self.cut_hosts
        slot = window / max(1, len(kinds))
        for n, kind in enumerate(kinds):
            events.append((start + slot * n + 1.0, "cut", Cut(kind, targets[n % len(targets)])))
        return events

    # ------------------------------------------------------------------ faults
    def degrade(self) -> None:
        for host in self.degraded:
            self.lab.degrade(host)
        if self.relay is not None:
            self.relay.delaying.set()
        self.degraded_since = time.time()

    def restore(self) -> None:
        for host in self.degraded:
            self.lab.restore(host)
        if self.relay is not None:
            self.relay.delaying.clear()
        self.degraded_until = time.time()

    def cut(self, cut: Cut, running: Callable[[int], int], log: Path) -> bool:
        """Cut `cut.host` once it holds a job (or after HOLD_WAIT); False: not yet."""
        first = self._waiting_since.setdefault(cut.host, time.monotonic())
        held = running(cut.host)
        if held == 0 and time.monotonic() - first < HOLD_WAIT:
            return False
        del self._waiting_since[cut.host]
        cut.held = max(held, 0)
        if cut.kind == "link down":
            self.lab.cut(cut.host)
        else:
            self.lab.drop(cut.host, "in" if cut.kind == "drop database->host" else "out")
        cut.at = time.time()
        cut.log_offset = log.stat().st_size if log.exists() else 0
        self.done.append(cut)
        return True

    def settling(self, host: int, finished_since: Callable[[float], bool]) -> bool:
        """True while the host's last cut is not healed, or healed but the host has not
        finished a job since (for up to `resume_limit`): its next cut waits, so that each
        cut's rescue and resume are measured alone rather than through the next cut."""
        previous = [c for c in self.done if c.host == host]
        if not previous:
            return False
        last = previous[-1]
        if not last.healed_at:
            return True
        if time.time() - last.healed_at >= self.resume_limit:
            return False
        return not finished_since(last.healed_at)

    def heal(self, cut: Cut) -> None:
        if cut.kind == "link down":
            self.lab.heal(cut.host)
        else:
            self.lab.undrop(cut.host)
        cut.healed_at = time.time()

    # ------------------------------------------------------------------ observations
    def sample_skews(self, engine: sa.Engine, fleet: Fleet) -> None:
        """The clock skew each skewed host's worker reported (its registry row)."""
        with engine.connect() as conn:
            rows = conn.execute(sa.select(workers.c.id, workers.c.clock_skew_seconds)).all()
        for worker_id, skew in rows:
            host = host_of(worker_id, fleet)
            if host in self.skewed and skew is not None:
                self.skews[host] = float(skew)

    def evaluate(self, engine: sa.Engine, fleet: Fleet) -> list[str]:
        """Fill in each cut's figures; returns the failures."""
        failures: list[str] = []
        with engine.connect() as conn:
            attempts = conn.execute(
                sa.select(
                    job_attempts.c.worker_id,
                    job_attempts.c.outcome,
                    job_attempts.c.finished_at,
                    job_attempts.c.started_at,
                )
            ).all()
        by_host: dict[int, list[tuple[str, float]]] = {}
        claimed: dict[tuple[int, float], float] = {}  # (host, rescued at) -> claimed at
        for worker_id, outcome, finished_at, started_at in attempts:
            host = host_of(worker_id, fleet)
            if host is not None and finished_at is not None:
                by_host.setdefault(host, []).append((outcome, _epoch(finished_at)))
                if outcome == "lost" and started_at is not None:
                    claimed[(host, _epoch(finished_at))] = _epoch(started_at)
        for host, rows in by_host.items():
            self.finished[host] = sum(1 for o, _ in rows if o == "succeeded")
        for cut in self.done:
            mine = by_host.get(cut.host, [])
            # Rescues of this cut: before the host's next cut, and not long after the heal.
            later = [c.at for c in self.done if c.host == cut.host and c.at > cut.at]
            until = min([*later, cut.healed_at + self.rescue_limit])
            rescues = [t for o, t in mine if o == "lost" and cut.at <= t < until]
            lost = sorted(t - cut.at for t in rescues)
            # A lease runs from the claim: a claim that still reached the database during
            # a one-way cut (only the answer was lost) is rescued a lease after it.
            waited = [t - max(cut.at, claimed.get((cut.host, t), cut.at)) for t in rescues]
            cut.slowest = max(waited) if waited else None
            cut.rescued = len(lost)
            cut.first_rescue = lost[0] if lost else None
            cut.last_rescue = lost[-1] if lost else None
            after = sorted(t - cut.healed_at for o, t in mine if o != "lost")
            after = [t for t in after if t >= 0]
            cut.resumed = after[0] if after else None
            offsets = [c.log_offset for c in self.done if c.host == cut.host and c.at > cut.at]
            cut.fenced = _fenced_between(
                fleet.slots[cut.host].log, cut.log_offset, min(offsets) if offsets else None
            )
            where = f"{cut.kind} of host {cut.host}"
            if cut.rescued < cut.stranded and cut.kind != "drop database->host":
                # (When only the replies are lost, the host's completions still reach the
                # database: the jobs it held may simply finish, with nothing to rescue.)
                failures.append(
                    f"{where}: {cut.stranded} job(s) stranded, only {cut.rescued} rescued"
                )
            elif cut.slowest is not None and cut.slowest > self.rescue_limit:
                failures.append(
                    f"{where}: a job was rescued {cut.slowest:.1f}s after the cut or its "
                    f"claim (limit {self.rescue_limit:g}s)"
                )
            if cut.resumed is None or cut.resumed > self.resume_limit:
                shown = "never" if cut.resumed is None else f"{cut.resumed:.1f}s"
                failures.append(
                    f"{where}: finished no job within {self.resume_limit:g}s of the heal ({shown})"
                )
        if self.done and not any(cut.rescued for cut in self.done):
            failures.append("no cut left a job to rescue: the run proved no rescue")
        for index in {cut.host for cut in self.done} | set(self.degraded) | set(self.skewed):
            if fleet.slots[index].starts != 1:
                failures.append(
                    f"host {index}: its worker was restarted {fleet.slots[index].starts - 1} "
                    "time(s); it should have ridden the fault out"
                )
        for host in self.degraded:
            during = [
                t
                for o, t in by_host.get(host, [])
                if o == "succeeded" and self.degraded_since <= t <= self.degraded_until
            ]
            if not during:
                failures.append(f"degraded host {host} finished no job while degraded")
        for host in self.skewed:
            skew = self.skews.get(host)
            if skew is None or abs(skew - SKEW_SECONDS) > 60:
                failures.append(f"skewed host {host}: reported clock skew {skew} s, not ~3600")
            if not any(o == "succeeded" for o, _ in by_host.get(host, [])):
                failures.append(f"skewed host {host} finished no job")
        return failures

    def report(self) -> list[str]:
        lines = [
            f"hosts: {self.hosts} network namespaces (cut: {self.cut_hosts}, degraded: "
            f"{self.degraded}, clock {SKEW}: {self.skewed}); delay by "
            f"{'tc netem' if self.lab.netem else 'latency relay (no netem in this kernel)'}"
        ]
        for cut in self.done:
            first = "-" if cut.first_rescue is None else f"{cut.first_rescue:.1f}s"
            last = "-" if cut.last_rescue is None else f"{cut.last_rescue:.1f}s"
            resumed = "never" if cut.resumed is None else f"{cut.resumed:.1f}s"
            lines.append(
                f"  {cut.kind:<20} host {cut.host} for {cut.healed_at - cut.at:.1f}s: held "
                f"{cut.held} ({cut.stranded} still running 1 s in), rescued {cut.rescued} "
                f"({first}..{last} after the cut; at most "
                f"{'-' if cut.slowest is None else f'{cut.slowest:.1f}s'} after the cut or "
                f"the claim), resumed "
                f"{resumed} after the heal, {cut.fenced} late completion(s) fenced"
            )
        for host in range(self.hosts):
            lines.append(f"  host {host}: {self.finished.get(host, 0)} jobs succeeded")
        for host, skew in sorted(self.skews.items()):
            lines.append(f"  host {host} reported clock skew {skew:.0f}s")
        return lines


def host_of(worker_id: str | None, fleet: Fleet) -> int | None:
    """The slot (= host) whose process wrote `worker_id` (`host:pid:suffix`)."""
    found = _WORKER_PID.search(worker_id or "")
    if not found:
        return None
    pid = int(found.group(1))
    for slot in fleet.slots:
        if pid in slot.pids:
            return slot.index
    return None


def running_jobs(engine: sa.Engine, fleet: Fleet, host: int) -> int:
    """Jobs the host's current worker holds (-1 when the database cannot say)."""
    pids = fleet.slots[host].pids
    if not pids:
        return 0
    try:
        with engine.connect() as conn:
            return int(
                conn.execute(
                    sa.select(sa.func.count())
                    .select_from(jobs)
                    .where(jobs.c.status == "running", jobs.c.locked_by.like(f"%:{pids[-1]}:%"))
                ).scalar_one()
            )
    except sa.exc.DBAPIError:
        return -1


def finished_since(engine: sa.Engine, fleet: Fleet, host: int, since: float) -> bool:
    """Whether the host's current worker finished an attempt (not a rescue) since
    `since` (epoch seconds); False when the database cannot say."""
    pids = fleet.slots[host].pids
    if not pids:
        return False
    try:
        with engine.connect() as conn:
            found = conn.execute(
                sa.select(job_attempts.c.id)
                .where(
                    job_attempts.c.worker_id.like(f"%:{pids[-1]}:%"),
                    job_attempts.c.outcome != "lost",
                    job_attempts.c.finished_at >= datetime.fromtimestamp(since, UTC),
                )
                .limit(1)
            ).first()
    except sa.exc.DBAPIError:
        return False
    return found is not None


def _fenced_between(log: Path, start: int, end: int | None) -> int:
    """`-> fenced` outcome lines the worker logged between two log offsets."""
    try:
        with log.open("rb") as handle:
            handle.seek(start)
            text = handle.read(-1 if end is None else max(0, end - start))
    except OSError:
        return 0
    return len(_FENCED.findall(text.decode(errors="replace")))


def _epoch(value: datetime) -> float:
    return value.timestamp()
