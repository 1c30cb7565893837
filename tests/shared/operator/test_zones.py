"""Times written in a viewer's zone: which names count as zones, the wall-clock text
with its abbreviation, and the daylight-saving edges where the abbreviation is what
tells two equal wall-clock times apart."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from jobdesk.shared.core.errors import ValidationError
from jobdesk.shared.operator.queries.holds import Hold, HoldKind, clock
from jobdesk.shared.operator.zones import abbreviation, check_timezone, known_zone, local_text

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


@pytest.mark.parametrize("name", ["Europe/Berlin", "America/New_York", "Asia/Tokyo", "UTC"])
def test_iana_names_are_zones(name: str) -> None:
    assert check_timezone(name) == name
    assert known_zone(name) is not None


@pytest.mark.parametrize(
    "name",
    ["Mars/Olympus_Mons", "europe/berlin ", "../../etc/passwd", "/etc/localtime", "Berlin",
     "Europe/Berlin\x00", "X" * 300, "", "   "],
)  # fmt: skip
def test_anything_else_is_refused_with_what_to_write(name: str) -> None:
    with pytest.raises(ValidationError) as raised:
        check_timezone(name)
    assert raised.value.field == "timezone"
    assert "Europe/Berlin" in raised.value.message
    assert known_zone(name) is None


def test_a_refused_name_is_shown_back_shortened() -> None:
    with pytest.raises(ValidationError) as raised:
        check_timezone("Y" * 500)
    assert len(raised.value.message) < 200


@pytest.mark.parametrize("name", [None, 42, ["Europe/Berlin"]])
def test_non_text_is_no_zone(name: object) -> None:
    assert known_zone(name) is None
    with pytest.raises(ValidationError):
        check_timezone(name)


def test_berlin_on_the_last_sunday_of_october_shows_the_same_wall_clock_twice() -> None:
    # 2026-10-25: clocks go back from 03:00 CEST to 02:00 CET at 01:00 UTC.
    before = datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
    after = datetime(2026, 10, 25, 1, 30, tzinfo=UTC)
    assert local_text(before, BERLIN) == "2026-10-25 02:30:00 CEST"
    assert local_text(after, BERLIN) == "2026-10-25 02:30:00 CET"
    # The hour before the change and the hour after it, on the same local day.
    assert local_text(before - timedelta(hours=1), BERLIN, now=after) == "01:30:00 CEST"
    assert local_text(after + timedelta(hours=1), BERLIN, now=before) == "03:30:00 CET"


def test_berlin_on_the_last_sunday_of_march_skips_an_hour() -> None:
    # 2026-03-29: 02:00 CET becomes 03:00 CEST at 01:00 UTC.
    assert local_text(datetime(2026, 3, 29, 0, 59, tzinfo=UTC), BERLIN) == "2026-03-29 01:59:00 CET"
    assert local_text(datetime(2026, 3, 29, 1, 0, tzinfo=UTC), BERLIN) == "2026-03-29 03:00:00 CEST"


def test_the_date_is_left_out_only_on_the_same_local_day() -> None:
    moment = datetime(2026, 12, 1, 23, 30, tzinfo=UTC)
    # 23:30 UTC on Dec 1 is 18:30 in New York (same day) but 08:30 on Dec 2 in Tokyo.
    now = datetime(2026, 12, 1, 23, 45, tzinfo=UTC)
    assert local_text(moment, NEW_YORK, now=now) == "18:30:00 EST"
    assert local_text(moment, ZoneInfo("Asia/Tokyo"), now=now) == "08:30:00 JST"
    day_before = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    assert local_text(moment, ZoneInfo("Asia/Tokyo"), now=day_before) == "2026-12-02 08:30:00 JST"
    assert local_text(moment, UTC, now=now, seconds=False) == "23:30 UTC"


def test_zones_without_an_abbreviation_show_their_offset() -> None:
    moment = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)
    assert abbreviation(moment.astimezone(ZoneInfo("America/Sao_Paulo"))) == "UTC-03:00"
    assert local_text(moment, ZoneInfo("Asia/Kathmandu")) == "2026-07-01 17:45:00 UTC+05:45"
    assert abbreviation(moment.astimezone(ZoneInfo("Asia/Kolkata"))) == "IST"


def test_the_edges_of_the_calendar_fall_back_to_utc() -> None:
    assert local_text(datetime(1, 1, 1, tzinfo=UTC), ZoneInfo("America/Los_Angeles")).endswith(
        "UTC"
    )


def test_hold_lines_read_on_the_viewers_clock() -> None:
    now = datetime(2026, 10, 25, 0, 0, tzinfo=UTC)
    until = datetime(2026, 10, 25, 1, 30, tzinfo=UTC)
    hold = Hold(HoldKind.ENDPOINT_PAUSED, name="crm", until=until, detail="CRM maintenance")
    assert hold.text(now) == "held: endpoint crm paused until 01:30 UTC — CRM maintenance"
    assert hold.text(now, BERLIN) == "held: endpoint crm paused until 02:30 CET — CRM maintenance"
    assert clock(until + timedelta(days=1), now, NEW_YORK) == "2026-10-25 21:30 EDT"


def test_a_naive_time_is_read_as_utc_not_as_the_servers_clock() -> None:
    naive = datetime(2026, 10, 25, 1, 30)
    assert local_text(naive, BERLIN) == "2026-10-25 02:30:00 CET"
    assert local_text(naive, UTC, now=naive) == "01:30:00 UTC"
