"""Fills concurrency slots a race left free (`jobdesk.shared.flow.concurrency`): the
triggers never wait for a key another transaction holds, so a slot given up at that
moment can stay free until this pass moves the key's next waiting job in. Passes take
turns through the keys (a bounded number each), so a pass stays cheap with many keys."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

from jobdesk.shared.flow.concurrency import REFILL_INTERVAL_SECONDS, SlotRefill
from jobdesk.shared.settings import Settings


class SlotRefiller:
    """One per scheduler: remembers where the last pass stopped."""

    def __init__(self) -> None:
        self._refill = SlotRefill()

    @staticmethod
    def interval_seconds(settings: Settings) -> float:
        del settings  # fixed: a free slot should not wait much longer than this
        return REFILL_INTERVAL_SECONDS

    def run_once(self, engine: sa.Engine, now: datetime) -> int:
        del now
        with engine.begin() as conn:
            return self._refill.run(conn)
