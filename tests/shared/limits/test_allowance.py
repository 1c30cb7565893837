"""Tokens taken from the shared bucket in batches and spent locally: how many statements
that saves, and that the limit still holds across processes within the documented bound."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.db import make_engine
from jobdesk.shared.limits import allowance
from jobdesk.shared.limits.allowance import LocalAllowance, acquire, batch_size
from jobdesk.shared.limits.models import rate_limits
from jobdesk.shared.limits.rate_limits import Bucket
from jobdesk.shared.settings import Settings

T0 = datetime(2030, 1, 1, tzinfo=UTC)
KEY = "webhook:crm"


def bucket_statements(engine: sa.Engine) -> list[str]:
    """Every statement sent that touches the shared bucket, as it happens."""
    seen: list[str] = []

    @sa.event.listens_for(engine, "before_cursor_execute")
    def _count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "jobdesk_rate_limits" in statement:
            seen.append(statement)

    return seen


def transactions(engine: sa.Engine) -> list[int]:
    """One entry per transaction committed on `engine` (a refill is one)."""
    seen: list[int] = []

    @sa.event.listens_for(engine, "commit")
    def _count(conn: Any) -> None:
        seen.append(1)

    return seen


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.fixture
def second_engine(db_url: str) -> Iterator[sa.Engine]:
    """Another process's engine on the same database (its own allowance)."""
    engine = make_engine(db_url, settings=Settings())
    yield engine
    engine.dispose()


def test_batch_size_is_50_ms_of_the_rate_within_bounds() -> None:
    assert batch_size(Bucket.of(20, 1, None)) == 1  # the webhook default: no batching
    assert batch_size(Bucket.of(600, 60, None)) == 1
    assert batch_size(Bucket.of(1000, 1, None)) == 50
    assert batch_size(Bucket.of(1_000_000, 1, None)) == allowance.MAX_BATCH
    assert batch_size(Bucket.of(1000, 1, 3)) == 3  # never more than the burst


def test_one_statement_per_batch_not_per_token(engine: sa.Engine) -> None:
    refills = transactions(engine)
    waits = [acquire(engine, KEY, rate=1000, now=T0) for _ in range(120)]
    assert waits == [0.0] * 120
    # a batch of 50, then top-ups of 38 whenever a quarter (12) is left: 50 + 3 * 38
    assert len(refills) == 4
    assert allowance.allowance(engine, KEY).held == 50 + 3 * 38 - 120


def test_topped_up_before_it_runs_out_and_never_above_a_batch(engine: sa.Engine) -> None:
    refills = transactions(engine)
    limit = LocalAllowance(KEY)
    held = []
    for _ in range(200):
        assert limit.acquire(engine, rate=1000, now=T0) == 0.0
        held.append(limit.held)
    assert max(held) <= batch_size(Bucket.of(1000, 1, None))
    assert min(held) >= 12  # the top-up came while a quarter of the batch was left
    assert len(refills) == 1 + (200 - 38) // 38 + 1


def test_an_empty_bucket_is_remembered_until_its_next_token(engine: sa.Engine) -> None:
    seen = bucket_statements(engine)
    assert [acquire(engine, KEY, rate=2, now=T0) for _ in range(2)] == [0.0, 0.0]
    asked = len(seen)
    wait = acquire(engine, KEY, rate=2, now=T0)
    assert wait == pytest.approx(0.5, rel=1e-3)
    asked_empty = len(seen)
    assert asked_empty > asked
    # later callers get the remaining wait without a round trip
    assert acquire(engine, KEY, rate=2, now=at(0.2)) == pytest.approx(0.3, rel=1e-3)
    assert len(seen) == asked_empty
    assert acquire(engine, KEY, rate=2, now=at(0.5)) == 0.0
    assert len(seen) > asked_empty


def test_unspent_tokens_expire_and_are_not_saved_up(engine: sa.Engine) -> None:
    seen = bucket_statements(engine)
    assert acquire(engine, KEY, rate=1000, now=T0) == 0.0
    assert allowance.allowance(engine, KEY).held == 49
    before = len(seen)
    later = at(allowance.MAX_HOLD_SECONDS)
    assert acquire(engine, KEY, rate=1000, now=later) == 0.0
    assert len(seen) > before  # the old batch was dropped; a new one was taken
    assert allowance.allowance(engine, KEY).held == 49


def test_a_clock_going_back_asks_the_bucket_again(engine: sa.Engine) -> None:
    assert [acquire(engine, KEY, rate=1, now=T0)] == [0.0]
    assert acquire(engine, KEY, rate=1, now=at(-30)) > 0  # no tokens minted by going back


def test_a_changed_limit_starts_over(engine: sa.Engine) -> None:
    limit = LocalAllowance(KEY)
    assert limit.acquire(engine, rate=1000, now=T0) == 0.0
    assert limit.held == 49
    assert limit.acquire(engine, rate=20, now=T0) == 0.0
    assert limit.held == 0  # 20/s takes one token at a time


def test_each_engine_has_its_own_allowance(engine: sa.Engine, second_engine: sa.Engine) -> None:
    assert allowance.allowance(engine, KEY) is allowance.allowance(engine, KEY)
    assert allowance.allowance(engine, KEY) is not allowance.allowance(second_engine, KEY)


@pytest.mark.slow
def test_two_processes_stay_within_the_documented_bound(
    engine: sa.Engine, second_engine: sa.Engine
) -> None:
    rate, burst = 200.0, 20.0
    size = batch_size(Bucket.of(rate, 1, burst))
    assert size == 10
    spent: list[float] = []
    step = 0.002
    for i in range(int(1.5 / step)):
        now = at(i * step)
        for eng in (engine, second_engine):
            while acquire(eng, KEY, rate=rate, burst=burst, now=now) == 0.0:
                spent.append(i * step)
    # every token came from the shared bucket: the long run is exactly the limit
    assert len(spent) <= burst + rate * spent[-1] + 2 * size
    assert len(spent) >= rate * 1.4
    # and in any window of w seconds at most burst + rate * w + P * B started
    for i, start in enumerate(spent):
        for j in range(i, len(spent)):
            window = spent[j] - start
            assert j - i + 1 <= burst + rate * window + 2 * size + 1e-9, (i, j, window)


def test_threads_spend_exactly_what_was_taken(engine: sa.Engine) -> None:
    limit = LocalAllowance(KEY)
    waits: list[float] = []

    def spend() -> None:
        for _ in range(100):
            waits.append(limit.acquire(engine, rate=1_000_000, now=T0))

    threads = [threading.Thread(target=spend) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert waits == [0.0] * 800
    with engine.connect() as conn:
        left = conn.execute(sa.select(rate_limits.c.tokens)).scalar_one()
    # every token spent or held was taken from the shared bucket, none twice
    assert 1_000_000 - left == 800 + limit.held
    assert limit.held <= allowance.MAX_BATCH
