"""PostgreSQL: row locks with SKIP LOCKED, LISTEN/NOTIFY, JSONB, planner estimates."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import ClauseElement, Executable

from jobdesk.shared.core.driver import postgresql_fast
from jobdesk.shared.core.driver.base import (
    SelectT,
    TimeUnit,
    check_payload_key,
    first_take,
    refilled,
)
from jobdesk.shared.core.driver.postgresql_engine import (
    IDLE_IN_TRANSACTION_TIMEOUT_MS,
    bound_transaction,
    is_pooled,
    make_postgresql_engine,
    sets_deadlines_per_transaction,
)
from jobdesk.shared.core.driver.postgresql_jobs import PostgreSQLJobs
from jobdesk.shared.core.driver.types import UTCDateTime
from jobdesk.shared.core.notifications import NOTIFY_CHANNEL
from jobdesk.shared.settings import Settings


class Explain(Executable, ClauseElement):
    """`EXPLAIN (FORMAT JSON) <query>` with the query's parameters bound as usual: the
    plan, whose top node carries the estimate (tests read plans with it too)."""

    inherit_cache = False

    def __init__(self, query: sa.Select[Any]) -> None:
        self.query = query


@compiles(Explain, "postgresql")
def _compile_explain(element: Explain, compiler: Any, **kw: Any) -> str:
    return "EXPLAIN (FORMAT JSON) " + str(compiler.process(element.query, **kw))


# Rate-limit buckets. The row is locked first (FOR UPDATE in the CTE) so the level it
# computes is the newest one, and the UPDATE writes only when at least one whole token
# is there. The refilled level and the number taken are returned because RETURNING sees
# only the new row, from which the number taken cannot be told apart from a fractional
# remainder.
_TAKE_TOKENS = sa.text(
    """
    WITH current AS (
        SELECT key, LEAST(:capacity, tokens + GREATEST(0, EXTRACT(EPOCH FROM
                   (CAST(:now AS timestamptz) - updated_at))) * :refill) AS level
          FROM jobdesk_rate_limits
         WHERE key = :key
           FOR UPDATE
    ), take AS (
        SELECT key, level, LEAST(:want, FLOOR(level)) AS n FROM current
    )
    UPDATE jobdesk_rate_limits AS b
       SET tokens = take.level - take.n,
           updated_at = GREATEST(b.updated_at, CAST(:now AS timestamptz))
      FROM take
     WHERE b.key = take.key AND take.n >= 1
    RETURNING take.n, take.level
    """
)
# A bucket seen for the first time starts full; a concurrent first taker makes this a
# no-op, and the caller then takes from the row that one created.
_CREATE_BUCKET = sa.text(
    """
    INSERT INTO jobdesk_rate_limits (key, tokens, updated_at)
    VALUES (:key, :capacity - :n, :now)
    ON CONFLICT (key) DO NOTHING
    RETURNING tokens
    """
)
_BUCKET = sa.text("SELECT tokens, updated_at FROM jobdesk_rate_limits WHERE key = :key").columns(
    tokens=sa.Float(), updated_at=UTCDateTime()
)


# One notification per queue, delivered when the caller commits (like an enqueue's).
_NOTIFY_QUEUES = sa.text(
    f"SELECT count(pg_notify('{NOTIFY_CHANNEL}', q)) FROM unnest(CAST(:queues AS text[])) AS q"
)


class PostgreSQLDriver(PostgreSQLJobs):
    name: ClassVar[str] = "postgresql"
    listens: ClassVar[bool] = True
    locks_rows: ClassVar[bool] = True
    keeps_job_counts: ClassVar[bool] = True
    writes_in_ctes: ClassVar[bool] = True

    def execute_fast(
        self, conn: sa.Connection, statement: sa.Executable, params: dict[str, Any]
    ) -> Any:
        return postgresql_fast.execute(conn, statement, params)

    def json_param(self, value: Any) -> Any:
        return postgresql_fast.json_param(value)

    def make_engine(
        self,
        url: sa.URL,
        *,
        settings: Settings,
        sqlite_begin: str,
        pool_size: int,
        application_name: str,
        index_plans: bool,
        idle_in_transaction_seconds: float | None,
    ) -> sa.Engine:
        idle_ms = IDLE_IN_TRANSACTION_TIMEOUT_MS
        if idle_in_transaction_seconds is not None:
            idle_ms = max(1, int(idle_in_transaction_seconds * 1000))
        return make_postgresql_engine(
            url, settings, pool_size, application_name, index_plans, idle_ms
        )

    def is_pooled(self, bind: sa.Connection | sa.Engine) -> bool:
        return is_pooled(bind)

    def sets_deadlines_per_transaction(self, bind: sa.Connection | sa.Engine) -> bool:
        return sets_deadlines_per_transaction(bind)

    def autocommits_single_statements(self, bind: sa.Connection | sa.Engine) -> bool:
        return not sets_deadlines_per_transaction(bind)

    def bound_transaction(self, conn: sa.Connection, seconds: float) -> None:
        bound_transaction(conn, seconds)

    def insert(self, table: sa.Table) -> pg.Insert:
        return pg.insert(table)

    def for_update(
        self, query: SelectT, *, skip_locked: bool = False, key_share: bool = False
    ) -> SelectT:
        return query.with_for_update(skip_locked=skip_locked, key_share=key_share)

    def refill_slots(
        self, conn: sa.Connection, *, after_key: str, max_keys: int
    ) -> tuple[int, str | None]:
        row = conn.execute(
            sa.text("SELECT moved, last_key FROM jobdesk_slots_refill(:after, :n)"),
            {"after": after_key, "n": max_keys},
        ).one()
        return int(row.moved), row.last_key

    def notify_queues(self, conn: sa.Connection, queues: Sequence[str]) -> None:
        if queues:
            conn.execute(_NOTIFY_QUEUES, {"queues": sorted(set(queues))})

    def take_tokens(
        self,
        conn: sa.Connection,
        key: str,
        want: int,
        *,
        capacity: float,
        refill_per_second: float,
        now: datetime,
    ) -> tuple[int, float]:
        now_param = sa.bindparam("now", now, type_=UTCDateTime())
        params = {"key": key, "want": want, "capacity": capacity, "refill": refill_per_second}
        take = _TAKE_TOKENS.bindparams(now_param)
        taken = conn.execute(take, params).first()
        if taken is not None:
            return int(taken.n), float(taken.level - taken.n)
        first = first_take(capacity, want)
        created = _CREATE_BUCKET.bindparams(now_param)
        if conn.execute(created, {**params, "n": first}).first() is not None:
            return first, capacity - first
        taken = conn.execute(take, params).first()  # someone else created it meanwhile
        if taken is not None:
            return int(taken.n), float(taken.level - taken.n)
        # Not a whole token: nothing was written; read the level to say how long to wait.
        row = conn.execute(_BUCKET, {"key": key}).first()
        if row is None:
            return 0, 0.0
        elapsed = (now - row.updated_at).total_seconds()
        return 0, refilled(row.tokens, elapsed, capacity, refill_per_second)

    @contextmanager
    def statement_deadline(self, conn: sa.Connection, seconds: float) -> Iterator[None]:
        # statement_timeout LOCAL to the caller's transaction.
        milliseconds = max(1, int(seconds * 1000))
        conn.execute(sa.select(sa.func.set_config("statement_timeout", str(milliseconds), True)))
        yield

    def estimate_count(self, conn: sa.Connection, query: sa.Select[Any]) -> int | None:
        (plan,) = conn.execute(Explain(query)).one()
        document = plan[0] if isinstance(plan, list) else plan
        return int(document["Plan"]["Plan Rows"])

    def utc_truncated(self, column: Any, unit: TimeUnit) -> sa.ColumnElement[Any]:
        return sa.func.date_trunc(unit, sa.func.timezone("UTC", column))

    def utc_date_text(self, column: Any) -> sa.ColumnElement[str]:
        return sa.func.to_char(sa.func.timezone("UTC", column), "YYYY-MM-DD")

    def epoch_seconds(self, moment: Any) -> sa.ColumnElement[float]:
        return sa.func.date_part("epoch", moment)

    def seconds_between(self, later: Any, earlier: Any) -> sa.ColumnElement[float]:
        return sa.cast(sa.extract("epoch", later - earlier), sa.Float)

    def epoch_bucket(self, moment: Any, seconds: int) -> sa.ColumnElement[int]:
        return sa.cast(sa.func.floor((self.epoch_seconds(moment) + 30.0) / seconds), sa.BigInteger)

    def contains_like(self, column: Any, pattern: str, escape: str) -> sa.ColumnElement[bool]:
        return sa.type_coerce(column, sa.Text).ilike(pattern, escape=escape)

    def payload_match(self, path: tuple[str, ...], values: Sequence[Any]) -> sa.ColumnElement[bool]:
        payload = sa.type_coerce(sa.literal_column("jobdesk_jobs.payload"), pg.JSONB)
        return sa.or_(*(payload.contains(_nested(path, value)) for value in values))

    def greatest(self, first: Any, second: Any) -> sa.ColumnElement[Any]:
        return sa.func.greatest(first, second)  # NULLs are ignored

    def payload_text_sql(self, key: str) -> str:
        return f"(payload ->> '{check_payload_key(key)}')"

    def payload_text(self, key: str) -> sa.ColumnElement[str]:
        # Qualified, so it binds to the jobs table whatever else the statement joins.
        key = check_payload_key(key)
        return sa.literal_column(f"(jobdesk_jobs.payload ->> '{key}')", sa.String())


def _nested(path: tuple[str, ...], value: Any) -> object:
    """`{"a": {"b": value}}` for path ("a", "b")."""
    document: object = value
    for key in reversed(path):
        document = {key: document}
    return document
