"""Leader lease and the workers table (unit level; the subprocess tests cover takeover)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.leader import LEADER, acquire_lease, current_lease, release_lease
from jobdesk.shared.core.worker_registry import (
    deregister_worker,
    heartbeat_worker,
    list_live_workers,
    mark_stopping,
    new_worker_id,
    prune_stale_workers,
    register_worker,
)

T0 = datetime(2030, 1, 1, tzinfo=UTC)
TTL = timedelta(seconds=10)


def acquire(engine: sa.Engine, holder: str, now: datetime) -> bool:
    with engine.begin() as conn:
        return acquire_lease(conn, LEADER, holder, ttl=TTL, now=now)


def test_one_holder_until_expiry_then_takeover(engine: sa.Engine) -> None:
    assert acquire(engine, "a", T0)
    assert not acquire(engine, "b", T0 + timedelta(seconds=5))
    assert acquire(engine, "a", T0 + timedelta(seconds=5))  # renewal
    with engine.connect() as conn:
        lease = current_lease(conn, LEADER)
    assert lease is not None
    assert (lease.holder, lease.acquired_at, lease.expires_at) == (
        "a",
        T0,
        T0 + timedelta(seconds=15),
    )
    assert not acquire(engine, "b", T0 + timedelta(seconds=14))
    assert acquire(engine, "b", T0 + timedelta(seconds=15))
    assert not acquire(engine, "a", T0 + timedelta(seconds=16))
    with engine.connect() as conn:
        lease = current_lease(conn, LEADER)
    assert lease is not None
    assert (lease.holder, lease.acquired_at) == ("b", T0 + timedelta(seconds=15))


def test_release_frees_the_lease_at_once(engine: sa.Engine) -> None:
    assert acquire(engine, "a", T0)
    with engine.begin() as conn:
        assert not release_lease(conn, LEADER, "b")
        assert release_lease(conn, LEADER, "a")
    assert acquire(engine, "b", T0)


def test_bad_lease_arguments(engine: sa.Engine) -> None:
    with engine.begin() as conn, pytest.raises(ValueError, match="ttl"):
        acquire_lease(conn, LEADER, "a", ttl=timedelta(0), now=T0)


def test_worker_ids_are_unique_per_process_even_with_same_host_and_pid() -> None:
    ids = {new_worker_id("web-1", 1) for _ in range(100)}
    assert len(ids) == 100
    assert all(i.startswith("web-1:1:") for i in ids)
    assert len(new_worker_id("h" * 500, 7)) <= 100


def test_worker_lifecycle(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        register_worker(
            conn,
            worker_id="w1",
            host="h",
            pid=1,
            queues=["email"],
            job_types=["email.send"],
            concurrency=4,
            version="0.1.0",
            now=T0,
        )
        assert heartbeat_worker(conn, "w1", now=T0 + timedelta(seconds=5), clock_skew_seconds=0.5)
        assert not heartbeat_worker(conn, "nobody", now=T0)
        mark_stopping(conn, "w1", now=T0 + timedelta(seconds=6))
    with engine.connect() as conn:
        live = list_live_workers(conn, now=T0 + timedelta(seconds=10), stale_after=TTL)
    assert [(w.id, w.queues, w.stopping, w.clock_skew_seconds) for w in live] == [
        ("w1", ["email"], True, 0.5)
    ]
    with engine.begin() as conn:
        assert prune_stale_workers(conn, now=T0 + timedelta(seconds=10), older_than=TTL) == 0
        assert prune_stale_workers(conn, now=T0 + timedelta(seconds=30), older_than=TTL) == 1
        deregister_worker(conn, "w1")
