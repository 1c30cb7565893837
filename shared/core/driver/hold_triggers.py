"""The hold triggers' SQL, per database (`jobdesk.shared.flow.holds` says what holds do
and installs them). Here because they write `jobdesk_jobs`: every statement that does is
the driver's.

A job that could run — `queued`, retrying (`failed`), or waiting for a slot of its key —
and matches an active hold is parked: `waiting`, `held_by` the hold (the oldest one that
matches). The triggers catch rows as they are written: a new job, a retry, a dependent
released, a job moved into a slot, a job let go by another hold's release. Placing a hold
parks the jobs already there (`Driver.hold_jobs`); releasing one lets them go
(`Driver.release_held`), and these triggers hold again whatever another hold matches.
Both databases do the same; each statement first asks whether any hold is active, which
is one probe of a small index, so without holds the triggers cost next to nothing.
"""

from __future__ import annotations

from jobdesk.shared.core.states import JobStatus

_QUEUED = JobStatus.QUEUED.value
_FAILED = JobStatus.FAILED.value
_WAITING = JobStatus.WAITING.value

ACTIVE_HOLDS = "SELECT 1 FROM jobdesk_holds WHERE released_at IS NULL"


def holdable(row: str = "") -> str:
    """Whether `row` is a job a hold parks: it could run and no hold has it yet."""
    r = f"{row}." if row else ""
    return (
        f"({r}held_by IS NULL AND ({r}status IN ('{_QUEUED}', '{_FAILED}') "
        f"OR ({r}status = '{_WAITING}' AND {r}waiting_for = 0)))"
    )


def _pg_payload_match(hold: str, row: str) -> str:
    return (
        f"EXISTS (SELECT 1 FROM jsonb_array_elements({hold}.candidates) AS c(v) "
        f"WHERE {row}.payload #> string_to_array({hold}.path, '.') = c.v)"
    )


def _sqlite_payload_match(hold: str, row: str) -> str:
    # NULL, not an error, for a stored payload that is not JSON (a plain-SQL row).
    at = f"'$.' || {hold}.path"
    kind = f"(CASE WHEN json_valid({row}.payload) THEN json_type({row}.payload, {at}) END)"
    value = f"json_extract({row}.payload, {at})"
    return (
        f"EXISTS (SELECT 1 FROM json_each({hold}.candidates) AS c WHERE "
        f"(c.type = 'text' AND {kind} = 'text' AND {value} = c.value) "
        f"OR (c.type IN ('integer', 'real') AND {kind} IN ('integer', 'real') "
        f"AND {value} = c.value) "
        f"OR (c.type IN ('true', 'false', 'null') AND {kind} = c.type))"
    )


def matches(hold: str, row: str, *, postgresql: bool) -> str:
    """Whether the job `row` matches the hold `hold` (both table aliases)."""
    payload = _pg_payload_match(hold, row) if postgresql else _sqlite_payload_match(hold, row)
    return (
        f"(({hold}.match = 'concurrency_key' AND {row}.concurrency_key = {hold}.value) "
        f"OR ({hold}.match = 'group_key' AND {row}.group_key = {hold}.value) "
        f"OR ({hold}.match = 'payload' AND {payload}))"
    )


def first_hold(row: str, *, postgresql: bool) -> str:
    """The oldest active hold matching `row` (NULL: none)."""
    return (
        f"(SELECT h.id FROM jobdesk_holds AS h WHERE h.released_at IS NULL "
        f"AND {matches('h', row, postgresql=postgresql)} ORDER BY h.id LIMIT 1)"
    )


# Row triggers whose WHEN clause lets in only rows a hold could park: a claim (to
# `running`) or a completion never calls the function (a statement trigger ran on every
# claim and completion and cost the worker's throughput).
_PG_FUNCTION = f"""
CREATE OR REPLACE FUNCTION jobdesk_holds_catch() RETURNS trigger
LANGUAGE plpgsql SET jit = off AS $$
BEGIN
    IF NOT EXISTS ({ACTIVE_HOLDS}) THEN
        RETURN NULL;
    END IF;
    UPDATE jobdesk_jobs AS j
       SET status = '{_WAITING}', waiting_for = NULL, held_by = c.hold,
           updated_at = statement_timestamp()
      FROM (SELECT {first_hold("NEW", postgresql=True)} AS hold) AS c
     WHERE j.id = NEW.id AND c.hold IS NOT NULL AND {holdable("j")};
    RETURN NULL;
END $$"""

#: The PostgreSQL function and triggers (the migration and `create_all` run them).
POSTGRESQL_DDL: tuple[str, ...] = (
    _PG_FUNCTION,
    *(
        f"CREATE TRIGGER jobdesk_holds_{op.lower()} AFTER {op} ON jobdesk_jobs "
        f"FOR EACH ROW WHEN {holdable('NEW')} EXECUTE FUNCTION jobdesk_holds_catch()"
        for op in ("INSERT", "UPDATE")
    ),
)
POSTGRESQL_DROP: tuple[str, ...] = (
    "DROP TRIGGER IF EXISTS jobdesk_holds_insert ON jobdesk_jobs",
    "DROP TRIGGER IF EXISTS jobdesk_holds_update ON jobdesk_jobs",
    "DROP FUNCTION IF EXISTS jobdesk_holds_catch()",
)

_SQLITE_NOW = "(strftime('%Y-%m-%d %H:%M:%f', 'now') || '000')"
_SQLITE_CATCH = f"""
    UPDATE jobdesk_jobs
       SET status = '{_WAITING}', waiting_for = NULL, updated_at = {_SQLITE_NOW},
           held_by = {first_hold("jobdesk_jobs", postgresql=False)}
     WHERE id = NEW.id AND {holdable()}
       AND {first_hold("jobdesk_jobs", postgresql=False)} IS NOT NULL;"""

#: The SQLite triggers (row triggers: one writer at a time).
SQLITE_DDL: tuple[str, ...] = (
    f"""CREATE TRIGGER jobdesk_holds_insert AFTER INSERT ON jobdesk_jobs
WHEN {holdable("NEW")} AND EXISTS ({ACTIVE_HOLDS})
BEGIN{_SQLITE_CATCH}
END""",
    f"""CREATE TRIGGER jobdesk_holds_update AFTER UPDATE OF status ON jobdesk_jobs
WHEN {holdable("NEW")} AND EXISTS ({ACTIVE_HOLDS})
BEGIN{_SQLITE_CATCH}
END""",
)
SQLITE_DROP: tuple[str, ...] = (
    "DROP TRIGGER IF EXISTS jobdesk_holds_insert",
    "DROP TRIGGER IF EXISTS jobdesk_holds_update",
)
