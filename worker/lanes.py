"""What the dispatcher claims for: one lane per slot group and kind of handler.

A slot group's plain handlers run on its threads (`SlotPool`, `--concurrency` slots) and
its `async def` handlers on its event loop (`AsyncPool`, `JOBDESK_ASYNC_CONCURRENCY`
tasks). Each lane claims only the job types of its kind, so a backlog of one kind never
takes the other's slots; a kind with no registered type has no lane.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from jobdesk.worker.config import SlotGroup, WorkerConfig


@dataclass(frozen=True)
class Lane:
    key: str
    group: SlotGroup
    job_types: tuple[str, ...]
    is_async: bool
    slots: int


def lanes_for(
    config: WorkerConfig, plain_types: Sequence[str], async_types: Sequence[str]
) -> list[Lane]:
    lanes: list[Lane] = []
    for group in config.groups:
        if plain_types:
            lanes.append(Lane(group.name, group, tuple(plain_types), False, group.slots))
        if async_types:
            lanes.append(
                Lane(
                    f"{group.name}:async",
                    group,
                    tuple(async_types),
                    True,
                    config.async_concurrency,
                )
            )
    return lanes
