"""Run profiles: how many jobs, workers and faults of each kind, and the time budget.

The driver enqueues `jobs` at a steady `rate` (jobs/s): a `baseline` window without
faults, the fault window, and an `after` window without faults; then it waits up to
`drain` seconds for every job to reach a final state. The fault counts are minimums:
the checker fails the run when fewer happened than planned.

`exhaustions` windows fill the server's `max_connections` with idle sessions (new
connections are refused; open ones keep working); `termination_loops` windows end every
worker backend every `termination_period` seconds (`pg_terminate_backend`). Neither
may cost a job an attempt: Jobdesk's own database calls inside handlers are retried and
at worst snooze the attempt.

`hosts` > 0 puts one worker on each of that many network-namespace hosts
(`tests.chaos.netlab`, root and the `ip`/`nft` tools needed) and enables the partition
faults of `tests.chaos.partitions`: link-down `cuts`, `one_way_cuts`, hosts with a
degraded link and hosts with a clock an hour off.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    name: str
    backend: str  # "postgresql" (private instance) or "sqlite"
    jobs: int
    rate: float
    workers: int
    concurrency: int
    baseline: float
    after: float
    kills: int
    failpoint_crashes: int
    armed_slots: int
    stops: int
    pg_fast_restarts: int = 0
    pg_immediate_restarts: int = 0
    pauses: int = 0
    pause_seconds: float = 10.0
    terminations: int = 0
    receiver_faults: int = 0
    hosts: int = 0
    cuts: int = 0
    one_way_cuts: int = 0
    degraded_hosts: int = 0
    skewed_hosts: int = 0
    cut_seconds: float = 9.0
    """Longer than the lease (3 s) + the leader hand-over and hold-back: jobs are rescued."""
    drain: float = 60.0
    recovery_limit: float = 10.0
    budget: float = 300.0
    """Seconds the whole run (set-up to verdict) may take; over it is a failure."""
    via_pgbouncer: bool = False
    """Workers connect through a private PgBouncer in transaction pooling mode."""
    exhaustions: int = 0
    exhaustion_seconds: float = 8.0
    termination_loops: int = 0
    termination_loop_seconds: float = 8.0
    termination_period: float = 0.5
    max_connections: int = 300
    """The private server's `max_connections` (small where it is to be exhausted)."""
    workflows: int = 0
    """One workflow unit (a batch with callbacks and an `after=` chain, see
    `tests.chaos.workflows`) per this many plain jobs; 0: none."""

    @property
    def duration(self) -> float:
        return self.jobs / self.rate

    @property
    def fault_window(self) -> float:
        return self.duration - self.baseline - self.after

    @property
    def planned_faults(self) -> int:
        return (
            self.kills
            + self.failpoint_crashes
            + self.stops
            + self.pg_fast_restarts
            + self.pg_immediate_restarts
            + self.pauses
            + self.terminations
            + self.receiver_faults
            + self.cuts
            + self.one_way_cuts
            + self.exhaustions
            + self.termination_loops
        )


PROFILES: dict[str, Profile] = {
    "ci": Profile(
        name="ci",
        backend="postgresql",
        jobs=1300,
        rate=10.0,
        workers=5,
        concurrency=5,
        baseline=12.0,
        after=20.0,
        kills=10,
        failpoint_crashes=20,
        armed_slots=3,
        stops=2,
        pg_fast_restarts=1,
        pg_immediate_restarts=1,
        pauses=1,
        terminations=2,
        receiver_faults=6,
        budget=300.0,
        workflows=50,
    ),
    # The same faults through PgBouncer (transaction pooling), kept short for CI: server
    # restarts and terminated server connections behind the pooler, workers killed and
    # frozen, crash points armed in the claim/complete path.
    "pgbouncer": Profile(
        name="pgbouncer",
        backend="postgresql",
        jobs=600,
        rate=10.0,
        workers=4,
        concurrency=4,
        baseline=10.0,
        after=15.0,
        kills=2,
        failpoint_crashes=3,
        # Two armed workers: one restarting after its crash (slow on a busy machine) does
        # not leave the window short of its planned crashes.
        armed_slots=2,
        stops=1,
        pg_fast_restarts=1,
        pg_immediate_restarts=1,
        terminations=2,
        receiver_faults=2,
        budget=180.0,
        via_pgbouncer=True,
    ),
    "soak": Profile(
        name="soak",
        backend="postgresql",
        jobs=20000,
        rate=25.0,
        workers=5,
        concurrency=8,
        baseline=20.0,
        after=40.0,
        kills=40,
        failpoint_crashes=60,
        armed_slots=2,
        stops=8,
        pg_fast_restarts=3,
        pg_immediate_restarts=3,
        pauses=2,
        terminations=10,
        receiver_faults=20,
        drain=120.0,
        budget=1300.0,
    ),
    # Four hosts, one worker each: hosts 0 and 1 take turns being cut off (host 0: link
    # down, later host->database dropped; host 1: database->host dropped), host 2 has
    # 1 % loss and 50 ms +- 20 ms delay, host 3's clock is an hour ahead. A host is cut
    # again only once it finished a job after its previous heal, so each cut's rescue
    # and resume are measured alone. Run by .ci/run on its own: about 1.5 minutes.
    "partition": Profile(
        name="partition",
        backend="postgresql",
        jobs=900,
        rate=15.0,
        workers=4,
        concurrency=4,
        baseline=8.0,
        after=12.0,
        kills=0,
        failpoint_crashes=0,
        armed_slots=0,
        stops=0,
        receiver_faults=0,
        hosts=4,
        cuts=1,
        one_way_cuts=2,
        degraded_hosts=1,
        skewed_hosts=1,
        drain=30.0,
        budget=120.0,
    ),
    # The database misbehaving under handlers that apply effects: every connection slot
    # taken by idle sessions for a while (the workers' own sessions ended first, so none
    # can reconnect), then every worker backend terminated twice a second for a while.
    # Nothing lost, stuck or doubled, and no attempt spent by it. Run by .ci/run after
    # the others: about 1.5 minutes.
    "dbfaults": Profile(
        name="dbfaults",
        backend="postgresql",
        jobs=600,
        rate=10.0,
        workers=3,
        concurrency=4,
        baseline=12.0,
        after=12.0,
        kills=0,
        failpoint_crashes=0,
        armed_slots=0,
        stops=0,
        exhaustions=1,
        exhaustion_seconds=10.0,
        termination_loops=1,
        termination_loop_seconds=10.0,
        max_connections=100,
        drain=30.0,
        budget=120.0,
    ),
    "sqlite": Profile(
        name="sqlite",
        backend="sqlite",
        jobs=480,
        rate=8.0,
        workers=3,
        concurrency=4,
        baseline=8.0,
        after=10.0,
        kills=3,
        failpoint_crashes=6,
        armed_slots=2,
        stops=1,
        receiver_faults=2,
        budget=180.0,
        workflows=40,
    ),
}
