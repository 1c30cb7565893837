"""JobFilters: parsing, allow-lists and the round trip through URLs (no database)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from jobdesk import ValidationError
from jobdesk.shared.operator.filters import AuditFilters, JobFilters
from jobdesk.shared.operator.queries.jobs import like_pattern


def test_round_trip_keeps_every_filter() -> None:
    args = {
        "status": "dead",
        "queue": "webhooks",
        "type": "webhook.deliver",
        "group": "user:1",
        "key": "k 1",
        "error": "timed out",
        "range": "24h",
        "time": "finished",
        "sort": "oldest",
        "page_size": "25",
        "resolution": "unresolved",
        "fingerprint": "0123456789abcdef",
        "since": "2026-01-01T00:00:00",
    }
    filters = JobFilters.from_args(args)
    assert filters.since == datetime(2026, 1, 1, tzinfo=UTC)
    assert JobFilters.from_args(filters.to_args()) == filters
    assert filters.to_args() == args


def test_blank_values_do_not_filter() -> None:
    assert JobFilters.from_args({"status": "", "queue": "  ", "page_size": ""}) == JobFilters()
    assert JobFilters().is_empty


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"page_size": "101"}, "page_size"),
        ({"page_size": "-1"}, "page_size"),
        ({"sort": "id; drop table jobs"}, "sort"),
        ({"queue": "a" * 101}, "queue"),
        ({"queue": "<img>"}, "queue"),
        ({"group": "a\nb"}, "group"),
        ({"error": "\x00abc"}, "error"),
        ({"retried_from": "0"}, "retried_from"),
        ({"retried_from": "9" * 30}, "retried_from"),
    ],
)
def test_bad_values_name_the_parameter(args: dict[str, str], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        JobFilters.from_args(args)
    assert caught.value.field == field


def test_audit_filters() -> None:
    filters = AuditFilters.from_args({"actor": "ana", "action": "retry", "job": "7"}, ("retry",))
    assert AuditFilters.from_args(filters.to_args(), ("retry",)) == filters
    with pytest.raises(ValidationError):
        AuditFilters.from_args({"action": "drop"}, ("retry",))


def test_like_pattern_escapes_wildcards() -> None:
    assert like_pattern("50%_off\\x") == "%50\\%\\_off\\\\x%"


def test_ttl_cache_computes_once_per_ttl_and_clears() -> None:
    from jobdesk.dashboard.cache import TTLCache

    calls: list[int] = []

    def compute() -> int:
        calls.append(1)
        return len(calls)

    cache: TTLCache[int] = TTLCache(60)
    assert cache.get(compute) == 1
    assert cache.get(compute) == 1
    cache.clear()
    assert cache.get(compute) == 2
    assert TTLCache[int](0).get(compute) == 3
