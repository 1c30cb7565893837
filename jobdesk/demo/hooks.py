"""What the demo's job module installs in the worker (`jobdesk.demo.jobs` calls
`install()`; kept apart so importing these functions changes nothing).

It is what an app's own job module does: install the hooks that turn payload
references into data at run time, and register the app's report —

- the recipient resolver: `{"to_user_id": 42}` → the user's address and name (a user
  deleted meanwhile → `None` → the email job is dead, not retried);
- the data resolver: the CRM webhook's `{"data_ref": {"user_id": 42}}` → the user's
  current data;
- the `demo_signups` report over the demo's activity rows, and its nightly schedule
  (`demo.nightly_signups`, 02:00 UTC, the day that just ended: the Schedules page shows
  it; the story also requests tonight's run by hand so the demo shows a finished report).

One thing only the demo does: the CRM webhook's retry schedule is shortened from
1 min, 5 min, 30 min, 2 h to seconds (`JOBDESK_DEMO_WEBHOOK_BACKOFF`, default
`2,4,8,16`), so the story reaches its dead letter within a minute instead of hours.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from jobdesk.demo import story
from jobdesk.shared.core.db import make_engine
from jobdesk.shared.core.retry import Schedule
from jobdesk.shared.settings import Settings, SettingsError, parse_seconds
from jobdesk.worker.jobs import (
    Recipient,
    register_report,
    set_data_resolver,
    set_recipient_resolver,
)
from jobdesk.worker.registry import Registry, registry, schedule
from jobdesk.worker.schedules import ScheduleSpec

DEFAULT_DEMO_BACKOFF = "2,4,8,16"

_engine_lock = threading.Lock()
_engines: dict[str, sa.Engine] = {}


def _engine() -> sa.Engine:
    """The app's own engine (the demo's tables live in the Jobdesk database)."""
    settings = Settings.from_env()
    with _engine_lock:
        engine = _engines.get(settings.database_url)
        if engine is None:
            engine = make_engine(
                settings=settings,
                sqlite_begin="DEFERRED",
                pool_size=2,
                application_name="jobdesk-demo-app",
            )
            _engines[settings.database_url] = engine
        return engine


def close_engines() -> None:
    with _engine_lock:
        for engine in _engines.values():
            engine.dispose()
        _engines.clear()


def find_recipient(user_id: int) -> Recipient | None:
    with _engine().connect() as conn:
        user = story.find_user(conn, user_id)
    if user is None:
        return None
    return Recipient(user["email"], {"name": user["name"], "product_name": "Jobdesk Demo"})


def user_data(event: str, data_ref: dict[str, Any]) -> dict[str, Any]:
    del event
    user_id = data_ref.get("user_id")
    if not isinstance(user_id, int):
        raise ValueError("data_ref.user_id must be an integer")
    with _engine().connect() as conn:
        user = story.find_user(conn, user_id)
    if user is None:
        return {"user_id": user_id, "deleted": True}
    return {
        "user_id": user["id"],
        "name": user["name"],
        "email": user["email"],
        "plan": user["plan"],
    }


def declare_nightly_schedule(target: Registry = registry) -> ScheduleSpec:
    """The report the story requests by hand, declared for every night."""
    return schedule(
        story.NIGHTLY_SCHEDULE,
        "report.generate",
        {"report": story.REPORT_NAME, "params": {"date": "yesterday"}},
        cron=story.NIGHTLY_CRON,
        target=target,
    )


def parse_backoff(raw: str) -> tuple[float, ...]:
    """`"2,4,8,16"` → delays in seconds; a bad value names the variable."""
    name = "JOBDESK_DEMO_WEBHOOK_BACKOFF"
    parts = [part.strip() for part in raw.split(",") if part.strip()]
    if not parts:
        raise SettingsError(f"{name}: expected comma-separated seconds, e.g. 2,4,8,16")
    return tuple(parse_seconds(name, part) for part in parts)


def shorten_backoff(job_type: str, delays: Sequence[float], target: Registry = registry) -> None:
    """Replace the retry schedule of an already registered `job_type`."""
    registered = target.get(job_type)
    if registered is None:
        raise LookupError(f"job type {job_type!r} is not registered")
    policy = dataclasses.replace(registered.retry, backoff=Schedule.of_seconds(list(delays)))
    # Same handler, so the registry accepts the replacement.
    target.add(dataclasses.replace(registered, retry=policy))


def install(settings: Settings | None = None, target: Registry = registry) -> None:
    settings = settings or Settings.from_env()
    set_recipient_resolver(find_recipient)
    set_data_resolver(user_data)
    register_report(story.SIGNUPS_REPORT)
    declare_nightly_schedule(target)
    raw = settings.demo_webhook_backoff
    shorten_backoff("webhook.deliver", parse_backoff(raw), target)
