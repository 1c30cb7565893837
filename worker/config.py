"""What one `jobdesk worker` process runs: its slot groups and its timings.

Slots are the number of handlers that may run at once. `--queues` decides how they are
split so urgent queues never wait behind slow ones (R14):

- no `--queues`: one group of `--concurrency` slots for every queue;
- `--queues email,webhooks`: those queues share `--concurrency` slots;
- `--queues email=4,reports=1`: each named queue gets its own slots — a report backlog
  can use its one slot only, the email slots stay free for a password reset;
- mixed (`email=4,default,webhooks`): counted queues get their own slots, the others
  share `--concurrency`.

Within a group, jobs start in (priority, next_run_at, id) order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from jobdesk.shared.core import validation
from jobdesk.shared.core.errors import ValidationError
from jobdesk.shared.settings import Settings

DEFAULT_CONCURRENCY: Final = 10
DEFAULT_ASYNC_CONCURRENCY: Final = 200
MAX_SLOTS: Final = 1000
#: Most jobs claimed by one statement (the rest wait for the next claim). As many as may
#: wait for a slot (`pool.PREFETCH_MAX`): with quick handlers a claim then takes all the
#: room the slots made while the previous one was on its way, in one round trip (at 500
#: the dispatcher often went straight back for the rest: 12 % fewer jobs/s).
MAX_CLAIM_BATCH: Final = 1000
#: Connections the runtime keeps for itself: claim, completer, heartbeat, scheduler x2.
RESERVED_CONNECTIONS: Final = 5


class ConfigError(ValueError):
    """A worker option cannot be used; the message names the option."""


@dataclass(frozen=True, slots=True)
class SlotGroup:
    """Queues that share `slots`; `queues=None` means every queue."""

    name: str
    queues: tuple[str, ...] | None
    slots: int

    def serves(self, queue: str) -> bool:
        return self.queues is None or queue in self.queues


def parse_queues(spec: str | None, concurrency: int) -> list[SlotGroup]:
    """Turn a `--queues` value into slot groups (see the module docstring)."""
    if concurrency < 1 or concurrency > MAX_SLOTS:
        raise ConfigError(f"--concurrency: must be between 1 and {MAX_SLOTS}, got {concurrency}")
    items = [part.strip() for part in (spec or "").split(",") if part.strip()]
    if not items:
        return [SlotGroup("all", None, concurrency)]
    counted: list[SlotGroup] = []
    shared: list[str] = []
    seen: set[str] = set()
    for item in items:
        name, sep, raw_count = item.partition("=")
        name = name.strip()
        try:
            validation.check_name("queue", name)
        except ValidationError as exc:
            raise ConfigError(f"--queues: {name!r}: {exc.message}") from None
        if name in seen:
            raise ConfigError(f"--queues: queue {name!r} is listed twice")
        seen.add(name)
        if not sep:
            shared.append(name)
            continue
        try:
            count = int(raw_count)
        except ValueError:
            raise ConfigError(
                f"--queues: {item!r}: slots must be a whole number, e.g. {name}=4"
            ) from None
        if count < 1 or count > MAX_SLOTS:
            raise ConfigError(f"--queues: {item!r}: slots must be between 1 and {MAX_SLOTS}")
        counted.append(SlotGroup(name, (name,), count))
    groups = counted
    if shared:
        groups.append(SlotGroup("+".join(shared), tuple(shared), concurrency))
    total = sum(g.slots for g in groups)
    if total > MAX_SLOTS:
        raise ConfigError(f"--queues: {total} slots in all; at most {MAX_SLOTS} per process")
    return groups


#: Threads of each event loop's pool for its coroutines' blocking work — `ctx`'s database
#: calls, `webhook.deliver`'s look-ups, `asyncio.to_thread` — whatever the CPU count.
ASYNC_BLOCKING_THREADS: Final = 8


@dataclass(frozen=True)
class WorkerConfig:
    """Everything the runner needs besides the engine and the registry."""

    groups: tuple[SlotGroup, ...]
    lease_seconds: float
    heartbeat_seconds: float
    poll_interval_seconds: float
    shutdown_timeout_seconds: float
    leader_lease_seconds: float
    max_stuck_threads: int
    claim_batch: int = MAX_CLAIM_BATCH
    #: After a cancel request, how long a handler has to stop before it is stopped hard.
    cancel_grace_seconds: float = 10.0
    #: `async def` handlers in flight at once per slot group (its event loop's tasks).
    async_concurrency: int = DEFAULT_ASYNC_CONCURRENCY

    @property
    def total_slots(self) -> int:
        return sum(g.slots for g in self.groups)

    @property
    def handler_threads(self) -> int:
        """Threads that may run handlers' database work at once: the slot threads, and
        each slot group's event loop's thread pool (its coroutines' blocking steps)."""
        return self.total_slots + len(self.groups) * ASYNC_BLOCKING_THREADS

    @classmethod
    def build(
        cls,
        settings: Settings,
        *,
        queues: str | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
        max_stuck_threads: int | None = None,
    ) -> WorkerConfig:
        if settings.lease_seconds < 1:
            raise ConfigError("--lease / JOBDESK_LEASE_SECONDS: must be at least 1 second")
        if settings.poll_interval_seconds <= 0:
            raise ConfigError("--poll-interval / JOBDESK_POLL_INTERVAL_SECONDS: must be > 0")
        groups = tuple(parse_queues(queues, concurrency))
        total = sum(g.slots for g in groups)
        # Renew well before expiry: three heartbeats fit in one lease.
        heartbeat = min(
            settings.heartbeat_seconds or settings.lease_seconds, settings.lease_seconds / 3
        )
        leader = settings.leader_lease_seconds or max(
            settings.lease_seconds, 3 * settings.reaper_interval_seconds
        )
        if max_stuck_threads is None:
            max_stuck_threads = settings.max_stuck_threads
        if max_stuck_threads is None:
            max_stuck_threads = max(2, total)
        return cls(
            groups=groups,
            lease_seconds=settings.lease_seconds,
            heartbeat_seconds=heartbeat,
            poll_interval_seconds=settings.poll_interval_seconds,
            shutdown_timeout_seconds=settings.shutdown_timeout_seconds,
            leader_lease_seconds=leader,
            max_stuck_threads=max_stuck_threads,
            cancel_grace_seconds=settings.cancel_grace_seconds,
            async_concurrency=settings.async_concurrency,
        )
