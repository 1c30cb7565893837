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
from jobdesk.worker.loop import ServiceLoop

log = logging.getLogger("jobdesk.worker")

#: Longest single wait, so a stop request is seen promptly.
WAIT_SECONDS = 1.0


class Listener(ServiceLoop):
    # A lost connection, a refused one, a socket error: an outage, backed off.
    outage_errors = (psycopg.Error, OSError)

    def __init__(
        self,
        url: sa.URL,
        on_queues: Callable[[list[str] | None], None],
        *,
        connect_timeout: float,
    ) -> None:
        super().__init__("listener", log=log, interval=0.0)
        self._url = url
        self._on_queues = on_queues
        self._connect_timeout = connect_timeout
        self.connected = threading.Event()

    def step(self) -> None:
        """Listen on one connection until it fails or the loop stops."""
        conn: psycopg.Connection[Any] | None = None
        try:
            conn = listen_connection(self._url, connect_timeout=self._connect_timeout)
            self.connected.set()
            if self.failures:
                self._on_queues(None)  # may have missed notifications meanwhile
            self.healthy()
            while not self.stopping.is_set():
                queues = wait_for_queues(conn, WAIT_SECONDS)
                if queues:
                    self._on_queues(queues)
        except BaseException:
            self.connected.clear()
            raise
        finally:
            if conn is not None:
                with contextlib.suppress(psycopg.Error):
                    conn.close()
