"""What lives on one event loop and must be closed before the loop is.

An async client (a pooled HTTP connection, say) belongs to the loop that opened it: it
cannot be closed from another loop, and one left open when its loop closes warns about
an unclosed transport. Whoever opens such a thing registers its closer here; the loop's
owner — the worker's event loop thread, `drain()` — awaits `close_loop_resources()`
last, on that loop.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable

log = logging.getLogger("jobdesk.worker")

Closer = Callable[[], Awaitable[None]]

_closers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[Closer]] = (
    weakref.WeakKeyDictionary()
)


def on_loop_close(closer: Closer) -> None:
    """Await `closer()` when the running event loop's owner closes it."""
    _closers.setdefault(asyncio.get_running_loop(), []).append(closer)


async def close_loop_resources() -> None:
    """Run the running loop's closers (each once, newest first); one that fails is
    logged and the rest still run."""
    closers = _closers.pop(asyncio.get_running_loop(), [])
    for closer in reversed(closers):
        try:
            await closer()
        except Exception:
            log.exception("closing an event loop resource failed")
