"""The slot triggers' SQL, per database (`jobdesk.shared.flow.concurrency` says what they
do and installs them). Here because they write `jobdesk_jobs`: every statement that does
is the driver's.

Both databases decide from a count, never from a running counter: after the key is
locked (PostgreSQL: its `jobdesk_concurrency_keys` row; SQLite: one writer at a time) the
trigger counts the key's jobs that hold a slot, then parks
what is over the cap (`waiting`, `waiting_for = 0`) or moves the next waiting jobs in.
A statement that races another sees the other's work once the lock is its turn (each
statement of the trigger function reads a fresh snapshot), so whichever comes second
corrects; nothing drifts, and a row written by hand is counted like any other.
"""

from __future__ import annotations

from jobdesk.shared.core.models import ACTIVE_KEYED_SQL
from jobdesk.shared.core.notifications import NOTIFY_CHANNEL
from jobdesk.shared.core.states import JobStatus

#: A key whose job type declares no `concurrency=N` keeps at most this many jobs queued
#: at once (running ones do not count): its next jobs join the end of the claim order as
#: earlier ones are claimed, so keys take turns (see `jobdesk.shared.flow.concurrency`).
FAIR_WINDOW = 100

_QUEUED = JobStatus.QUEUED.value
_WAITING = JobStatus.WAITING.value
_RUNNING = JobStatus.RUNNING.value
_FAILED = JobStatus.FAILED.value


def holds_slot(row: str = "") -> str:
    """Whether `row` holds a slot of its key: queued always; running and retrying only
    under a declared limit (a key without one limits only how many wait in line)."""
    r = f"{row}." if row else ""
    return (
        f"({r}status = '{_QUEUED}' OR ({r}concurrency_limit IS NOT NULL "
        f"AND {r}status IN ('{_RUNNING}', '{_FAILED}')))"
    )


def waits_for_slot(row: str) -> str:
    """Whether `row` (of the key being looked at) waits for one of its key's slots."""
    return f"{row}.status = '{_WAITING}' AND {row}.waiting_for = 0"


def _held_count(key: str, lock: str = "") -> str:
    """How many jobs hold a slot of `key` (at most its cap, plus what one statement just
    added). Unqualified columns, the active-key index's predicate word for word (SQLite
    uses a partial index only then). `lock`: a locking clause for the counted rows."""
    return f"""(SELECT count(*) FROM (SELECT 1 FROM jobdesk_jobs
             WHERE concurrency_key = {key} AND {ACTIVE_KEYED_SQL} AND {holds_slot()}{lock})
             AS held)"""


# Slots held minus the cap, per locked key, in `keys` order. Counted without locking the
# holders: a holder another transaction is giving up still counts (never over the cap),
# and the slot it frees is filled by that transaction, the next statement on the key or
# the refill pass (`jobdesk_slots_refill`).
_EXCESS = f"""ARRAY(
      SELECT s.held - s.cap
        FROM (SELECT c.key, COALESCE(c.slot_limit, {FAIR_WINDOW}) AS cap,
                     {_held_count("c.key")} AS held
                FROM jobdesk_concurrency_keys AS c
               WHERE c.key = ANY(keys)) AS s
       ORDER BY s.key)"""

# Under the cap: the next waiting jobs of each key take the free slots, at the end of the
# claim order (which is what makes keys take turns). A waiter someone else is writing (an
# operator cancelling it) is passed over for the next one, so the slot does not stay free
# behind it. Needs `keys` (locked, sorted) and `excess`; sets `moved`. The ids are picked
# once (an ARRAY subquery): joined, the locking subquery was scanned again per row and
# moved in more than the free slots (the nested trigger then parked the extra ones).
_MOVE_IN = f"""WITH moved AS (
        UPDATE jobdesk_jobs AS j
           SET status = '{_QUEUED}', waiting_for = NULL, updated_at = statement_timestamp(),
               next_run_at = greatest(j.next_run_at, statement_timestamp())
         WHERE j.id = ANY(ARRAY(
               SELECT w.id
                 FROM unnest(keys, excess) AS x(k, n)
                 CROSS JOIN LATERAL (
                       SELECT w.id FROM jobdesk_jobs AS w
                        WHERE w.concurrency_key = x.k AND {waits_for_slot("w")}
                        ORDER BY w.priority, w.id
                        LIMIT greatest(-x.n, 0)
                          FOR UPDATE OF w SKIP LOCKED) AS w
                WHERE x.n < 0))
           AND {waits_for_slot("j")}
        RETURNING j.queue
    )
    SELECT (SELECT count(*) FROM moved),
           (SELECT count(pg_notify('{NOTIFY_CHANNEL}', r.q))
              FROM (SELECT DISTINCT queue AS q FROM moved) AS r)
      INTO moved, woken;"""

# The changed keys: an INSERT's new rows that hold a slot, an UPDATE's keys whose count of
# slots held changed, a DELETE's rows that held one. An UPDATE's old and new rows are
# summed, not joined: a key's column never changes, and a join of two transition tables
# (no statistics: each taken for a row or two) became a nested loop comparing every pair.
_CHANGED_KEYS = {
    "INSERT": f"""
        SELECT array_agg(k ORDER BY k), array_agg(l ORDER BY k), array_agg(d ORDER BY k)
          INTO keys, limits, deltas
          FROM (SELECT n.concurrency_key AS k, max(n.concurrency_limit) AS l, count(*) AS d
                  FROM slots_new AS n
                 WHERE n.concurrency_key IS NOT NULL AND {holds_slot("n")}
                 GROUP BY n.concurrency_key) AS m;""",
    "UPDATE": f"""
        SELECT array_agg(k ORDER BY k), array_agg(l ORDER BY k), array_agg(d ORDER BY k)
          INTO keys, limits, deltas
          FROM (SELECT c.k, max(c.l) AS l, sum(c.d) AS d
                  FROM (SELECT n.concurrency_key AS k, n.concurrency_limit AS l,
                               {holds_slot("n")}::integer AS d
                          FROM slots_new AS n WHERE n.concurrency_key IS NOT NULL
                        UNION ALL
                        SELECT o.concurrency_key, NULL, -({holds_slot("o")}::integer)
                          FROM slots_old AS o WHERE o.concurrency_key IS NOT NULL) AS c
                 GROUP BY c.k
                HAVING sum(c.d) <> 0) AS m;""",
    "DELETE": f"""
        SELECT array_agg(k ORDER BY k), array_agg(l ORDER BY k), array_agg(d ORDER BY k)
          INTO keys, limits, deltas
          FROM (SELECT o.concurrency_key AS k, max(o.concurrency_limit) AS l, -count(*) AS d
                  FROM slots_old AS o
                 WHERE o.concurrency_key IS NOT NULL AND {holds_slot("o")}
                 GROUP BY o.concurrency_key) AS m;""",
}

# The rows of this statement that took a slot, which are the ones parked when the key is
# over its cap (an INSERT's queued rows; an UPDATE's rows released to `queued`) and are
# still queued (a hold may have parked some first). Read only when a key is over its
# cap, which an UPDATE reaches only by releasing waiting jobs.
_ENTERED = {
    "INSERT": f"""SELECT n.* FROM slots_new AS n JOIN jobdesk_jobs AS now_ ON now_.id = n.id
                   WHERE now_.status = '{_QUEUED}'""",
    "UPDATE": f"""SELECT n.* FROM slots_new AS n JOIN jobdesk_jobs AS now_ ON now_.id = n.id
                   WHERE now_.status = '{_QUEUED}' AND EXISTS (
                         SELECT 1 FROM slots_old AS o
                          WHERE o.id = n.id AND NOT {holds_slot("o")})""",
}


def _function(operation: str) -> str:
    park = ""
    if operation in _ENTERED:
        park = f"""
    -- Over the cap: this statement's newest entrants wait for a slot (ranked in one
    -- pass: a per-key scan of the transition table, which has no index, was quadratic).
    UPDATE jobdesk_jobs AS j
       SET status = '{_WAITING}', waiting_for = 0, updated_at = statement_timestamp()
     WHERE j.id = ANY(ARRAY(
           SELECT r.id
             FROM (SELECT e.id, x.n, row_number() OVER (
                          PARTITION BY e.concurrency_key
                          ORDER BY e.priority DESC, e.id DESC) AS rank
                     FROM ({_ENTERED[operation]}) AS e
                     JOIN unnest(keys, excess) AS x(k, n) ON x.k = e.concurrency_key
                    WHERE x.n > 0) AS r
            WHERE r.rank <= r.n))
       AND j.status = '{_QUEUED}';"""
    return f"""
CREATE OR REPLACE FUNCTION jobdesk_slots_{operation.lower()}() RETURNS trigger
LANGUAGE plpgsql SET jit = off AS $$
DECLARE
    keys text[];
    limits integer[];
    deltas integer[];
    excess integer[];
    moved integer;
    woken integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM slots_{"old" if operation == "DELETE" else "new"}
                    WHERE concurrency_key IS NOT NULL) THEN
        RETURN NULL;
    END IF;
    {_CHANGED_KEYS[operation]}
    -- Keys that took slots are locked, in key order (statements on the same keys queue
    -- up, never deadlock); an INSERT records the limit its jobs carry.
    INSERT INTO jobdesk_concurrency_keys AS c (key, slot_limit, updated_at)
    SELECT m.k, m.l, statement_timestamp()
      FROM unnest(keys, limits, deltas) AS m(k, l, d) WHERE m.d > 0 ORDER BY m.k
    ON CONFLICT (key) DO UPDATE
       SET slot_limit = {"EXCLUDED.slot_limit" if operation == "INSERT" else "c.slot_limit"},
           updated_at = statement_timestamp();
    -- A key that only gave slots up needs nothing unless jobs wait for one, and then
    -- only if no one else holds the key. Waiting for it could deadlock (its holder may
    -- wait for a row this transaction wrote); the refill pass fills what is left free.
    SELECT array_agg(m.k ORDER BY m.k) INTO keys
      FROM unnest(keys, deltas) AS m(k, d)
     WHERE m.d > 0
        OR m.k IN (SELECT c.key FROM jobdesk_concurrency_keys AS c
                    WHERE c.key = ANY(keys) AND EXISTS (
                          SELECT 1 FROM jobdesk_jobs AS w
                           WHERE w.concurrency_key = c.key AND {waits_for_slot("w")})
                    ORDER BY c.key
                      FOR UPDATE SKIP LOCKED);
    IF keys IS NULL THEN
        RETURN NULL;
    END IF;

    excess := {_EXCESS};
    {park}
    {_MOVE_IN}
    RETURN NULL;
END $$"""


# The refill pass (the leader's maintenance, `Driver.refill_slots`): a slot given up while
# another transaction held the key, or while a job parked by a transaction not yet
# committed was invisible, stays free until the next statement on the key or this pass.
# It looks at up to `max_keys` keys after `after_key` (key order, so passes take turns
# through every key), locks those with waiting jobs and free slots as the triggers lock
# them (skipping any held now: their holder fills them) and moves their next waiters in.
# Returns how many moved and the last key looked at (NULL: the end was reached).
_REFILL = f"""
CREATE OR REPLACE FUNCTION jobdesk_slots_refill(
    after_key text, max_keys integer, OUT moved integer, OUT last_key text)
LANGUAGE plpgsql SET jit = off AS $$
DECLARE
    keys text[];
    excess integer[];
    woken integer;
    looked integer;
BEGIN
    moved := 0;
    SELECT max(f.key), count(*) INTO last_key, looked
      FROM (SELECT c.key FROM jobdesk_concurrency_keys AS c
             WHERE c.key > after_key ORDER BY c.key LIMIT max_keys) AS f;
    IF looked < max_keys THEN
        last_key := NULL;
    END IF;
    SELECT array_agg(l.key ORDER BY l.key) INTO keys
      FROM (SELECT c.key FROM jobdesk_concurrency_keys AS c
             WHERE c.key IN (SELECT f.key FROM jobdesk_concurrency_keys AS f
                              WHERE f.key > after_key
                                AND f.key <= COALESCE(last_key, f.key)
                                AND EXISTS (SELECT 1 FROM jobdesk_jobs AS w
                                             WHERE w.concurrency_key = f.key
                                               AND {waits_for_slot("w")})
                                AND {_held_count("f.key")}
                                    < COALESCE(f.slot_limit, {FAIR_WINDOW}))
             ORDER BY c.key
               FOR UPDATE SKIP LOCKED) AS l;
    IF keys IS NULL THEN
        RETURN;
    END IF;
    excess := {_EXCESS};
    {_MOVE_IN}
END $$"""


def _trigger(operation: str) -> str:
    tables = {
        "INSERT": "NEW TABLE AS slots_new",
        "UPDATE": "OLD TABLE AS slots_old NEW TABLE AS slots_new",
        "DELETE": "OLD TABLE AS slots_old",
    }[operation]
    name = f"jobdesk_slots_{operation.lower()}"
    return (
        f"CREATE TRIGGER {name} AFTER {operation} ON jobdesk_jobs REFERENCING {tables} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {name}()"
    )


_OPERATIONS = ("INSERT", "UPDATE", "DELETE")

#: The PostgreSQL functions and triggers (the migration and `create_all` run them).
POSTGRESQL_DDL: tuple[str, ...] = (
    *(statement for op in _OPERATIONS for statement in (_function(op), _trigger(op))),
    _REFILL,
)
POSTGRESQL_DROP: tuple[str, ...] = (
    *(
        statement
        for op in _OPERATIONS
        for statement in (
            f"DROP TRIGGER IF EXISTS jobdesk_slots_{op.lower()} ON jobdesk_jobs",
            f"DROP FUNCTION IF EXISTS jobdesk_slots_{op.lower()}()",
        )
    ),
    "DROP FUNCTION IF EXISTS jobdesk_slots_refill(text, integer)",
)

_SQLITE_NOW = "(strftime('%Y-%m-%d %H:%M:%f', 'now') || '000')"
_SQLITE_CAP = (
    f"COALESCE((SELECT slot_limit FROM jobdesk_concurrency_keys WHERE key = NEW.concurrency_key),"
    f" {FAIR_WINDOW})"
)
_SQLITE_HELD = _held_count("NEW.concurrency_key")
_SQLITE_PARK = f"""
    UPDATE jobdesk_jobs SET status = '{_WAITING}', waiting_for = 0, updated_at = {_SQLITE_NOW}
     WHERE id = NEW.id AND status = '{_QUEUED}' AND {_SQLITE_HELD} > {_SQLITE_CAP};"""
_SQLITE_MOVE_IN = f"""
    UPDATE jobdesk_jobs
       SET status = '{_QUEUED}', waiting_for = NULL, updated_at = {_SQLITE_NOW},
           next_run_at = max(next_run_at, {_SQLITE_NOW})
     WHERE id IN (SELECT w.id FROM jobdesk_jobs AS w
                   WHERE w.concurrency_key = NEW.concurrency_key AND {waits_for_slot("w")}
                   ORDER BY w.priority, w.id
                   LIMIT max({_SQLITE_CAP} - {_SQLITE_HELD}, 0));"""

#: The SQLite triggers (one writer at a time: row triggers, counting as they go).
SQLITE_DDL: tuple[str, ...] = (
    f"""CREATE TRIGGER jobdesk_slots_insert AFTER INSERT ON jobdesk_jobs
WHEN NEW.concurrency_key IS NOT NULL
BEGIN
    INSERT INTO jobdesk_concurrency_keys (key, slot_limit, updated_at)
    VALUES (NEW.concurrency_key, NEW.concurrency_limit, {_SQLITE_NOW})
    ON CONFLICT (key) DO UPDATE SET slot_limit = excluded.slot_limit,
                                    updated_at = excluded.updated_at;{_SQLITE_PARK}
END""",
    f"""CREATE TRIGGER jobdesk_slots_update AFTER UPDATE OF status ON jobdesk_jobs
WHEN NEW.concurrency_key IS NOT NULL AND {holds_slot("NEW")} <> {holds_slot("OLD")}
BEGIN
    INSERT INTO jobdesk_concurrency_keys (key, slot_limit, updated_at)
    VALUES (NEW.concurrency_key, NEW.concurrency_limit, {_SQLITE_NOW})
    ON CONFLICT (key) DO NOTHING;{_SQLITE_PARK}{_SQLITE_MOVE_IN}
END""",
    f"""CREATE TRIGGER jobdesk_slots_delete AFTER DELETE ON jobdesk_jobs
WHEN OLD.concurrency_key IS NOT NULL AND {holds_slot("OLD")}
BEGIN{_SQLITE_MOVE_IN.replace("NEW.", "OLD.")}
END""",
)
SQLITE_DROP: tuple[str, ...] = (
    "DROP TRIGGER IF EXISTS jobdesk_slots_insert",
    "DROP TRIGGER IF EXISTS jobdesk_slots_update",
    "DROP TRIGGER IF EXISTS jobdesk_slots_delete",
)
