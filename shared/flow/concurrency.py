"""Per-key concurrency and fair turns: `@job(concurrency=N)` with
`enqueue(..., concurrency_key="tenant:42")`.

A job enqueued with a key holds one of the key's slots while it is `queued` — and, when
its type declares `concurrency=N`, also while it runs or waits for its retry. A key has
N slots (`FAIR_WINDOW` when no limit is declared, counting queued jobs only). A job that
finds every slot taken is `waiting` with `waiting_for = 0` ("waiting for a slot") and
takes one, in (priority, id) order, when a job of its key gives one up:

- With a limit, at most N jobs of the key are queued, running or retrying at once, so
  never more than N run — across all workers and hosts, because the database decides:
  triggers on `jobdesk_jobs` (`jobdesk.shared.core.driver.slot_triggers`) count the key's
  slots in the transaction of every write that takes or gives one up (enqueue, claim,
  completion, reaper, cancel, plain SQL), with the key's row locked while they count.
  A slot given up while someone else holds the key is filled by the next statement on
  the key or, at the latest, by the leader's refill pass a second later
  (`SlotRefill`).
- Without one, at most `FAIR_WINDOW` jobs of a key are queued; as the claim takes them,
  the next ones of the key move in at the end of the claim order. A key with 200,000
  waiting jobs and a key with ten therefore take turns instead of the ten waiting for
  the 200,000. The claim itself is unchanged: it never looks at keys.

The claim statement is the same for every job, so queues without keys keep their
speed; a keyed job costs its trigger work when it is enqueued and when it gives up its
slot.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.driver.slot_triggers import (
    FAIR_WINDOW,
    POSTGRESQL_DDL,
    POSTGRESQL_DROP,
    SQLITE_DDL,
    SQLITE_DROP,
    holds_slot,
)
from jobdesk.shared.core.models import ACTIVE_KEYED_SQL, install_after_create, jobs
from jobdesk.shared.core.states import JobStatus
from jobdesk.shared.flow.models import concurrency_keys

__all__ = [
    "FAIR_WINDOW",
    "REFILL_INTERVAL_SECONDS",
    "KeySlots",
    "SlotRefill",
    "ddl",
    "drop_ddl",
    "key_slots",
    "refill_free_slots",
]

#: How often the leader's refill pass runs (`SlotRefill`).
REFILL_INTERVAL_SECONDS = 1.0
#: Keys one refill pass looks at (the next pass goes on from the last one).
REFILL_KEYS_PER_PASS = 1000


def ddl(bind: sa.Connection) -> tuple[str, ...]:
    """The statements that install the slot triggers on this connection's database."""
    return driver(bind).choose(postgresql=POSTGRESQL_DDL, sqlite=SQLITE_DDL)


def drop_ddl(bind: sa.Connection) -> tuple[str, ...]:
    """The statements that remove them (the migration's downgrade)."""
    return driver(bind).choose(postgresql=POSTGRESQL_DROP, sqlite=SQLITE_DROP)


@dataclass(frozen=True, slots=True)
class KeySlots:
    """One key's slots as they stand: `limit` None means no declared limit (then
    `slots` is `FAIR_WINDOW` and only queued jobs hold one)."""

    key: str
    limit: int | None
    slots: int
    #: Ids of the jobs holding a slot, oldest first (at most `slots` of them listed).
    holders: tuple[int, ...]
    running: int
    held: int
    waiting: int

    @property
    def busy(self) -> bool:
        return self.held >= self.slots

    def sentence(self) -> str:
        """ "3 of 3 slots of tenant:42 busy" (the why-waiting line)."""
        if self.limit is None:
            return (
                f"{self.held} of {self.slots} places in line of {self.key} taken "
                f"({self.waiting} waiting for a turn)"
            )
        return f"{self.held} of {self.slots} slots of {self.key} busy ({self.waiting} waiting)"


_j = jobs.c


def key_slots(conn: sa.Connection, key: str) -> KeySlots:
    """The slots of `key`: its limit, who holds them, how many wait (three index reads)."""
    limit = conn.execute(
        sa.select(concurrency_keys.c.slot_limit).where(concurrency_keys.c.key == key)
    ).scalar()
    slots = FAIR_WINDOW if limit is None else int(limit)
    held_rows = conn.execute(
        sa.select(_j.id, _j.status)
        .where(_j.concurrency_key == key, sa.text(ACTIVE_KEYED_SQL), sa.text(holds_slot()))
        .order_by(_j.id)
    ).all()
    running = sum(1 for row in held_rows if row.status == JobStatus.RUNNING.value)
    waiting = conn.execute(
        sa.select(sa.func.count())
        .select_from(jobs)
        .where(
            _j.concurrency_key == key,
            _j.status == JobStatus.WAITING.value,
            _j.waiting_for == 0,
        )
    ).scalar_one()
    return KeySlots(
        key=key,
        limit=None if limit is None else int(limit),
        slots=slots,
        holders=tuple(row.id for row in held_rows[:slots]),
        running=running,
        held=len(held_rows),
        waiting=int(waiting),
    )


@dataclass
class SlotRefill:
    """The leader's refill pass, run every `REFILL_INTERVAL_SECONDS`: a transaction that
    gives a slot up while another one holds the key does not wait for it (that wait could
    deadlock), and the holder may have counted the slot as still taken, so the slot can
    stay free. Each pass looks at the next `REFILL_KEYS_PER_PASS` keys, in turn through
    every key, and moves waiting jobs into free slots."""

    after_key: str = ""

    def run(self, conn: sa.Connection) -> int:
        moved, last = driver(conn).refill_slots(
            conn, after_key=self.after_key, max_keys=REFILL_KEYS_PER_PASS
        )
        self.after_key = last or ""
        return moved


def refill_free_slots(conn: sa.Connection) -> int:
    """One refill over every key (what the leader's passes do in turns); how many
    waiting jobs moved in."""
    refill, moved = SlotRefill(), 0
    while True:
        moved += refill.run(conn)
        if not refill.after_key:
            return moved


install_after_create(frozenset({"jobdesk_jobs", "jobdesk_concurrency_keys"}), ddl)
