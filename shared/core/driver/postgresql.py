"""PostgreSQL: row locks with SKIP LOCKED, LISTEN/NOTIFY, JSONB, planner estimates."""

from __future__ import annotations

from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import ClauseElement, Executable

from jobdesk.shared.core.driver.base import Driver, SelectT, TimeUnit, check_payload_key


class Explain(Executable, ClauseElement):
    """`EXPLAIN (FORMAT JSON) <query>` with the query's parameters bound as usual: the
    plan, whose top node carries the estimate (tests read plans with it too)."""

    inherit_cache = False

    def __init__(self, query: sa.Select[Any]) -> None:
        self.query = query


@compiles(Explain, "postgresql")
def _compile_explain(element: Explain, compiler: Any, **kw: Any) -> str:
    return "EXPLAIN (FORMAT JSON) " + str(compiler.process(element.query, **kw))


class PostgreSQLDriver(Driver):
    name: ClassVar[str] = "postgresql"
    listens: ClassVar[bool] = True
    locks_rows: ClassVar[bool] = True
    keeps_job_counts: ClassVar[bool] = True

    def insert(self, table: sa.Table) -> pg.Insert:
        return pg.insert(table)

    def for_update(self, query: SelectT, *, skip_locked: bool = False) -> SelectT:
        return query.with_for_update(skip_locked=skip_locked)

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

    def greatest(self, first: Any, second: Any) -> sa.ColumnElement[Any]:
        return sa.func.greatest(first, second)  # NULLs are ignored

    def payload_text_sql(self, key: str) -> str:
        return f"(payload ->> '{check_payload_key(key)}')"

    def payload_text(self, key: str) -> sa.ColumnElement[str]:
        # Qualified, so it binds to the jobs table whatever else the statement joins.
        return sa.literal_column(f"(jobdesk_jobs.{self.payload_text_sql(key)[1:]}", sa.String())
