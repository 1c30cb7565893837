"""Why a job waits (R26): each kind of hold read from where it lives, the batched page
version, the overview's held counts and the jobs list's `held` filter."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.queues import pause_queue
from jobdesk.shared.limits.breakers import open_breaker, record_failure
from jobdesk.shared.limits.rate_limits import try_acquire
from jobdesk.shared.operator.filters import JobFilters
from jobdesk.shared.operator.queries import holds as holds_module
from jobdesk.shared.operator.queries.holds import (
    HeldCount,
    Hold,
    HoldKind,
    held_counts,
    holds_for_job,
    holds_for_jobs,
)
from jobdesk.shared.operator.queries.jobs import list_jobs
from jobdesk.shared.operator.queries.stats import counts_by_status_queue_type
from jobdesk.shared.webhooks.endpoints import add_endpoint, pause_endpoint
from tests.factories import make_job

NOW = datetime(2030, 6, 1, 10, 0, tzinfo=UTC)
PAST = NOW - timedelta(minutes=5)


def webhook(conn: sa.Connection, endpoint: str = "crm", **fields: object) -> int:
    values: dict[str, object] = {
        "job_type": "webhook.deliver",
        "queue": "webhooks",
        "payload": {"endpoint": endpoint, "event": "user.created", "data": {}},
        "next_run_at": PAST,
    }
    values.update(fields)
    return make_job(conn, **values)


def endpoint(conn: sa.Connection, name: str = "crm") -> None:
    add_endpoint(conn, name, "http://127.0.0.1:9/hooks", allow_private=True, now=NOW - timedelta(1))


def lines(conn: sa.Connection, job_id: int) -> list[str]:
    return [hold.text(NOW) for hold in holds_for_job(conn, job_id, now=NOW)]


def test_a_paused_queue_holds_its_waiting_jobs(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        queued = make_job(conn, queue="reports", next_run_at=PAST)
        failed = make_job(conn, queue="reports", status="failed", attempts=1, next_run_at=PAST)
        elsewhere = make_job(conn, queue="email", next_run_at=PAST)
        pause_queue(conn, "reports", actor="sam", reason="month-end close", now=PAST)
    with engine.connect() as conn:
        assert lines(conn, queued) == ["held: queue reports paused by sam — month-end close"]
        assert lines(conn, failed) == ["held: queue reports paused by sam — month-end close"]
        # due and nothing in its way: it only waits for a worker
        assert lines(conn, elsewhere) == []
        (hold,) = holds_for_job(conn, queued, now=NOW)
    assert (hold.kind, hold.name, hold.by, hold.until) == (
        HoldKind.QUEUE_PAUSED,
        "reports",
        "sam",
        None,
    )


def test_a_paused_endpoint_holds_its_deliveries_until_the_pause_ends(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        endpoint(conn)
        endpoint(conn, "billing")
        held = webhook(conn, started_at=PAST, next_run_at=NOW + timedelta(seconds=40))
        other = webhook(conn, "billing")
        pause_endpoint(
            conn,
            "crm",
            actor="ada",
            reason="CRM maintenance",
            until=NOW + timedelta(minutes=10),
            now=PAST,
        )
    with engine.connect() as conn:
        # the snooze behind it is explained by the pause: one line, not two
        assert lines(conn, held) == ["held: endpoint crm paused until 10:10 UTC — CRM maintenance"]
        assert lines(conn, other) == []
    with engine.connect() as conn:
        later = NOW + timedelta(minutes=11)
        assert [h.kind for h in holds_for_job(conn, held, now=later)] == []


def test_a_disabled_endpoint_says_why_and_has_no_end(engine: sa.Engine) -> None:
    from jobdesk.shared.webhooks.endpoints import disable_endpoint

    with engine.begin() as conn:
        endpoint(conn)
        job = webhook(conn)
        disable_endpoint(conn, "crm", reason="HTTP 410 Gone", now=PAST)
    with engine.connect() as conn:
        assert lines(conn, job) == ["held: endpoint crm paused — disabled: HTTP 410 Gone"]


def test_an_open_breaker_holds_the_jobs_of_its_destination(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        delivery = webhook(conn)
        mail = make_job(conn, job_type="email.send", queue="email", next_run_at=PAST)
        for _ in range(5):
            record_failure(
                conn,
                "webhook:crm",
                PAST,
                "ConnectTimeout",
                threshold=5,
                cooldown=timedelta(minutes=42),
                max_cooldown=timedelta(hours=1),
            )
        open_breaker(conn, "smtp:default", PAST, "provider incident")
    with engine.connect() as conn:
        assert lines(conn, delivery) == [
            "held: breaker for crm open until 10:37 UTC — ConnectTimeout"
        ]
        assert lines(conn, mail) == [
            "held: breaker for smtp:default open — opened by hand, until someone closes it"
        ]


def test_a_snoozed_job_behind_an_empty_bucket_waits_for_the_rate_limit(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        snoozed = webhook(conn, started_at=PAST, next_run_at=NOW + timedelta(seconds=3))
        fresh = webhook(conn, next_run_at=NOW + timedelta(hours=1))
        assert try_acquire(conn, "webhook:crm", rate=1, per_seconds=60, now=NOW) == 0.0
    with engine.connect() as conn:
        assert lines(conn, snoozed) == ["waiting: rate limit webhook:crm (next try 10:00 UTC)"]
        # never handed back by a worker: its time is the reason, not the limit
        assert lines(conn, fresh) == ["scheduled: runs at 11:00 UTC"]


def test_a_group_waits_for_its_head_or_its_running_member(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        head = make_job(conn, group_key="user:42", next_run_at=PAST)
        second = make_job(conn, group_key="user:42", next_run_at=PAST)
        urgent = make_job(conn, group_key="user:7", priority=1, next_run_at=PAST)
        running = make_job(conn, group_key="user:7", priority=9, status="running", attempts=1)
        done = make_job(conn, group_key="user:9", status="dead", attempts=1)
        free = make_job(conn, group_key="user:9", next_run_at=PAST)
    with engine.connect() as conn:
        assert lines(conn, head) == []
        assert lines(conn, second) == [f"blocked by job #{head} (group user:42)"]
        # a running member blocks even an earlier one; a dead one blocks nobody
        assert lines(conn, urgent) == [f"blocked by job #{running} (group user:7)"]
        assert lines(conn, free) == []
        assert holds_for_job(conn, done, now=NOW) == []


def test_its_own_time_backoff_run_at_or_a_snooze(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        retry = make_job(
            conn,
            status="failed",
            attempts=2,
            max_attempts=5,
            next_run_at=NOW + timedelta(minutes=45),
        )
        later = make_job(conn, next_run_at=datetime(2030, 6, 2, 8, 30, tzinfo=UTC))
        snoozed = make_job(conn, started_at=PAST, next_run_at=NOW + timedelta(minutes=1))
    with engine.connect() as conn:
        assert lines(conn, retry) == [
            "scheduled: runs at 10:45 UTC (attempt 3 of 5, after backoff)"
        ]
        assert lines(conn, later) == ["scheduled: runs at 2030-06-02 08:30 UTC"]
        assert lines(conn, snoozed) == ["scheduled: runs at 10:01 UTC (snoozed by its handler)"]
        (hold,) = holds_for_job(conn, retry, now=NOW)
    assert hold.until == NOW + timedelta(minutes=45)


def test_several_holds_are_listed_in_the_order_a_worker_meets_them(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        endpoint(conn)
        first = webhook(conn, group_key="order:1")
        job = webhook(
            conn,
            group_key="order:1",
            status="failed",
            attempts=1,
            next_run_at=NOW + timedelta(minutes=5),
        )
        pause_endpoint(conn, "crm", actor="ada", reason="maintenance", now=PAST)
        pause_queue(conn, "webhooks", actor="sam", reason="incident 12", now=PAST)
    with engine.connect() as conn:
        kinds = [hold.kind for hold in holds_for_job(conn, job, now=NOW)]
    assert first != job
    assert kinds == [
        HoldKind.QUEUE_PAUSED,
        HoldKind.ENDPOINT_PAUSED,
        HoldKind.GROUP_BLOCKED,
        HoldKind.SCHEDULED,
    ]


def test_running_and_finished_jobs_wait_for_nothing(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        pause_queue(conn, "default", actor="sam", reason="drill", now=PAST)
        ids = [
            make_job(conn, status=status, attempts=1)
            for status in ("running", "succeeded", "dead", "cancelled")
        ]
    with engine.connect() as conn:
        assert holds_for_jobs(conn, ids, now=NOW) == {}
        assert holds_for_jobs(conn, [], now=NOW) == {}
        assert holds_for_job(conn, 10**12, now=NOW) == []


def test_a_stored_payload_that_is_not_json_is_no_error(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        job = webhook(conn, next_run_at=NOW + timedelta(minutes=1))
        conn.execute(
            sa.text("UPDATE jobdesk_jobs SET payload = :p WHERE id = :id"),
            {"p": '"just a string"', "id": job},
        )
    with engine.connect() as conn:
        assert lines(conn, job) == ["scheduled: runs at 10:01 UTC"]


@contextmanager
def counted_statements(engine: sa.Engine) -> Iterator[list[str]]:
    seen: list[str] = []

    def record(*args: object) -> None:
        if not str(args[2]).startswith("BEGIN"):
            seen.append(str(args[2]))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


def test_a_page_of_jobs_costs_the_same_few_statements_whatever_its_size(
    engine: sa.Engine,
) -> None:
    with engine.begin() as conn:
        endpoint(conn)
        pause_endpoint(conn, "crm", actor="ada", reason="maintenance", now=PAST)
        pause_queue(conn, "reports", actor="sam", reason="month-end close", now=PAST)
        record_failure(conn, "webhook:billing", PAST, "HTTP 503", threshold=1)
        ids = []
        for n in range(20):
            ids.append(webhook(conn, "crm" if n % 2 else "billing", group_key=f"g:{n % 4}"))
            ids.append(make_job(conn, queue="reports", next_run_at=PAST))
            ids.append(make_job(conn, status="failed", attempts=1, next_run_at=NOW + timedelta(1)))
    with engine.connect() as conn:
        with counted_statements(engine) as few:
            small = holds_for_jobs(conn, ids[:3], now=NOW)
        with counted_statements(engine) as many:
            page = holds_for_jobs(conn, ids, now=NOW)
        one_by_one = {i: holds_for_job(conn, i, now=NOW) for i in ids}
    assert len(many) == len(few) <= 6
    assert page == {i: found for i, found in one_by_one.items() if found}
    assert len(small) == 3
    assert len(page) == 60
    kinds = {hold.kind for found in page.values() for hold in found}
    assert kinds == {
        HoldKind.QUEUE_PAUSED,
        HoldKind.ENDPOINT_PAUSED,
        HoldKind.BREAKER_OPEN,
        HoldKind.GROUP_BLOCKED,
        HoldKind.SCHEDULED,
    }


def waiting_counts(conn: sa.Connection) -> dict[tuple[str, str], int]:
    found: dict[tuple[str, str], int] = {}
    for row in counts_by_status_queue_type(conn):
        if row.status in ("queued", "failed"):
            key = (row.queue, row.job_type)
            found[key] = found.get(key, 0) + row.count
    return found


def held_ids(conn: sa.Connection, **args: str) -> set[int]:
    page = list_jobs(conn, JobFilters.from_args({**args, "page_size": "100"}), now=NOW)
    return {job.id for job in page.items}


def test_the_overview_counts_each_held_job_once_and_the_list_shows_the_same_jobs(
    engine: sa.Engine,
) -> None:
    with engine.begin() as conn:
        endpoint(conn)
        endpoint(conn, "billing")
        crm = [webhook(conn) for _ in range(8)]
        in_paused_queue = webhook(conn, queue="reports")
        reports = [make_job(conn, queue="reports", next_run_at=PAST) for _ in range(3)]
        billing = [webhook(conn, "billing", status="failed", attempts=1) for _ in range(2)]
        mail = make_job(conn, job_type="email.send", queue="email", next_run_at=PAST)
        webhook(conn, status="succeeded", attempts=1)  # finished: not held
        pause_endpoint(conn, "crm", actor="ada", reason="CRM maintenance", now=PAST)
        pause_queue(conn, "reports", actor="sam", reason="month-end close", now=PAST)
        record_failure(conn, "webhook:billing", PAST, "HTTP 503", threshold=1)
        record_failure(conn, "webhook:crm", PAST, "HTTP 503", threshold=1)  # the pause wins
        open_breaker(conn, "smtp:default", PAST, "provider incident")
    with engine.connect() as conn:
        counts = held_counts(conn, now=NOW, waiting=waiting_counts(conn))
        assert counts == [
            HeldCount(HoldKind.QUEUE_PAUSED, "reports", 4),
            HeldCount(HoldKind.ENDPOINT_PAUSED, "crm", 8),
            HeldCount(HoldKind.BREAKER_OPEN, "smtp:default", 1),
            HeldCount(HoldKind.BREAKER_OPEN, "webhook:billing", 2),
        ]
        assert [c.filter_args for c in counts] == [
            {"queue": "reports", "held": "queue"},
            {"webhook": "crm", "held": "endpoint"},
            {"type": "email.send", "held": "breaker"},
            {"webhook": "billing", "held": "breaker"},
        ]
        assert held_ids(conn, **counts[0].filter_args) == {in_paused_queue, *reports}
        assert held_ids(conn, **counts[1].filter_args) == set(crm)
        assert held_ids(conn, **counts[2].filter_args) == {mail}
        assert held_ids(conn, **counts[3].filter_args) == set(billing)
        assert held_ids(conn, held="any") == {*crm, in_paused_queue, *reports, *billing, mail}
        assert held_ids(conn, webhook="billing") == set(billing)


def test_the_count_behind_an_endpoint_stops_at_the_cap(
    engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(holds_module, "COUNT_CAP", 3)
    with engine.begin() as conn:
        endpoint(conn)
        for _ in range(5):
            webhook(conn)
        pause_endpoint(conn, "crm", actor="ada", reason="maintenance", now=PAST)
    with engine.connect() as conn:
        counts = held_counts(conn, now=NOW, waiting=waiting_counts(conn))
    assert counts == [HeldCount(HoldKind.ENDPOINT_PAUSED, "crm", 3, capped=True)]


def test_nothing_held_costs_no_probe(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        webhook(conn)
    with engine.connect() as conn:
        waiting = waiting_counts(conn)
        with counted_statements(engine) as seen:
            assert held_counts(conn, now=NOW, waiting=waiting) == []
    # the queue pauses and the breakers: no endpoint is paused, so no job is read
    assert not any("jobdesk_jobs" in statement for statement in seen)


def test_a_bad_held_filter_is_refused_naming_the_choices() -> None:
    from jobdesk.shared.core.errors import ValidationError

    with pytest.raises(ValidationError) as caught:
        JobFilters.from_args({"held": "maybe"})
    assert caught.value.field == "held"
    assert "any, queue, endpoint, breaker" in str(caught.value)


def test_hold_text_for_a_breaker_half_open() -> None:
    hold = Hold(HoldKind.BREAKER_OPEN, "webhook:crm", detail="half-open: one probe is testing it")
    assert hold.text(NOW) == "held: breaker for crm open — half-open: one probe is testing it"


def test_the_destination_keys_are_the_ones_the_handlers_use() -> None:
    from jobdesk.worker.jobs.email_provider import PROVIDER_KEY
    from jobdesk.worker.jobs.webhook import breaker_key

    assert holds_module.SMTP_KEY == PROVIDER_KEY
    assert breaker_key("crm") == "webhook:crm"


# --- quarantines (`jobdesk.shared.flow.holds`) -----------------------------------------


def quarantine(conn: sa.Connection, match: str, value: str, until: datetime | None = None) -> int:
    from jobdesk.shared.flow.holds import HoldTarget, place_hold

    target = HoldTarget.parse(match, value)
    return place_hold(conn, target, reason="runaway import", actor="ana", now=PAST, until=until).id


def test_the_overview_counts_each_quarantine_and_the_list_shows_its_jobs(
    engine: sa.Engine,
) -> None:
    from jobdesk.shared.flow.holds import release_hold

    with engine.begin() as conn:
        tenant = [make_job(conn, concurrency_key="tenant:42", next_run_at=PAST) for _ in range(3)]
        orders = [make_job(conn, group_key="orders-7", next_run_at=PAST) for _ in range(2)]
        make_job(conn, concurrency_key="tenant:7", next_run_at=PAST)
        running = make_job(conn, concurrency_key="tenant:42", status="running", attempts=1)
        by_key = quarantine(conn, "concurrency_key", "tenant:42")
        by_group = quarantine(conn, "group_key", "orders-7")
        released = quarantine(conn, "payload", "account_id=1")
        release_hold(conn, released, actor="bo", now=PAST)
        pause_queue(conn, "reports", actor="sam", reason="month-end close", now=PAST)
        make_job(conn, queue="reports", next_run_at=PAST)
    with engine.connect() as conn:
        counts = held_counts(conn, now=NOW, waiting=waiting_counts(conn))
        assert counts == [
            HeldCount(HoldKind.QUEUE_PAUSED, "reports", 1),
            HeldCount(HoldKind.QUARANTINE, "group orders-7", 2, hold_id=by_group),
            HeldCount(HoldKind.QUARANTINE, "tenant:42", 3, hold_id=by_key),
        ]
        assert counts[2].filter_args == {"held_by": str(by_key)}
        assert held_ids(conn, **counts[1].filter_args) == set(orders)
        assert held_ids(conn, **counts[2].filter_args) == set(tenant)
        assert running not in held_ids(conn, held_by=str(by_key))
        # a quarantined job is `waiting`, never among the jobs a pause or breaker holds
        assert held_ids(conn, held="any").isdisjoint(tenant)


def test_the_count_behind_a_quarantine_stops_at_the_cap(
    engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(holds_module, "QUARANTINE_COUNT_CAP", 3)
    with engine.begin() as conn:
        for _ in range(5):
            make_job(conn, concurrency_key="tenant:42", next_run_at=PAST)
        hold_id = quarantine(conn, "concurrency_key", "tenant:42")
    with engine.connect() as conn:
        assert held_counts(conn, now=NOW, waiting=waiting_counts(conn)) == [
            HeldCount(HoldKind.QUARANTINE, "tenant:42", 3, capped=True, hold_id=hold_id)
        ]
        (listed,) = holds_module.quarantines(conn, active=True)
    assert (listed.hold.held, listed.capped, listed.count_text()) == (3, True, "3+")


def test_a_page_of_jobs_names_the_quarantine_holding_each(engine: sa.Engine) -> None:
    from jobdesk.shared.flow.holds import release_hold

    with engine.begin() as conn:
        held = [make_job(conn, concurrency_key="tenant:42", next_run_at=PAST) for _ in range(3)]
        free = make_job(conn, next_run_at=PAST)
        hold_id = quarantine(conn, "concurrency_key", "tenant:42", until=NOW + timedelta(hours=2))
    with engine.connect() as conn:
        with counted_statements(engine) as seen:
            found = holds_module.quarantines_for_jobs(conn, [*held, free])
        assert len(seen) == 2
        assert set(found) == set(held)
        hold = found[held[0]]
        assert (hold.kind, hold.hold_id) == (HoldKind.QUARANTINE, hold_id)
        assert hold.text(NOW) == (
            "held: quarantine of tenant:42 by ana — runaway import (until 12:00 UTC)"
        )
        assert holds_module.quarantines_for_jobs(conn, [free]) == {}
    with engine.begin() as conn:
        release_hold(conn, hold_id, actor="bo", now=NOW)
    with engine.connect() as conn:
        assert holds_module.quarantines_for_jobs(conn, held) == {}
        (gone,) = holds_module.quarantines(conn, active=False)
        assert holds_module.quarantines(conn, active=True) == []
    assert (gone.hold.id, gone.hold.released_by, gone.hold.held) == (hold_id, "bo", 0)


def test_a_bad_held_by_filter_is_refused_naming_it() -> None:
    from jobdesk.shared.core.errors import ValidationError

    for raw in ("tenant:42", "0", "-1", "9" * 30):
        with pytest.raises(ValidationError) as caught:
            JobFilters.from_args({"held_by": raw})
        assert caught.value.field == "held_by"
    assert JobFilters.from_args({"held_by": "7"}).to_args() == {"held_by": "7"}
