"""The PostgreSQL listener thread: wakes the runner the moment a job is enqueued.

Polling stays on as the fallback (and is the only mechanism on SQLite): a notification
can be missed while the listener reconnects, and retries that become due are not
announced. After a reconnect the listener wakes every group once, in case it missed
something while it was away.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg
import sqlalchemy as sa

from jobdesk.shared.core.notifications import listen_connection, wait_for_queues
from jobdesk.worker.resilience import Backoff, OutageLog

log = logging.getLogger("jobdesk.worker")

#: Longest single wait, so a stop request is seen promptly.
WAIT_SECONDS = 1.0


class Listener(threading.Thread):
    def __init__(
        self,
        url: sa.URL,
        on_queues: Callable[[list[str] | None], None],
        *,
        connect_timeout: float,
    ) -> None:
        super().__init__(name="jobdesk-listener", daemon=True)
        self._url = url
        self._on_queues = on_queues
        self._connect_timeout = connect_timeout
        self._stop_event = threading.Event()
        self._outage = OutageLog(log, "listener")
        self.connected = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        backoff = Backoff()
        while not self._stop_event.is_set():
            conn: psycopg.Connection[Any] | None = None
            try:
                conn = listen_connection(self._url, connect_timeout=self._connect_timeout)
                self.connected.set()
                if backoff.failures:
                    self._on_queues(None)  # may have missed notifications meanwhile
                backoff.reset()
                self._outage.recovered()
                while not self._stop_event.is_set():
                    queues = wait_for_queues(conn, WAIT_SECONDS)
                    if queues:
                        self._on_queues(queues)
            except (psycopg.Error, OSError) as exc:
                self.connected.clear()
                delay = backoff.next()
                self._outage.failed(exc, delay)
                self._stop_event.wait(delay)
            finally:
                if conn is not None:
                    with contextlib.suppress(psycopg.Error):
                        conn.close()
