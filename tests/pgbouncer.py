"""A private PgBouncer in transaction pooling mode in front of a PostgreSQL server.

Used by the PgBouncer tests, the torture suite's PgBouncer run and the throughput
benchmark. It writes an ini file (`pool_mode = transaction`, trust authentication, one
wildcard database pointing at the target server, so every database the tests create is
reachable through it), starts Debian's `pgbouncer` binary on a free 127.0.0.1 port and
stops it on `stop()` (also registered with `atexit`). PgBouncer refuses to run as root,
so under root it runs as the `postgres` user, like the private PostgreSQL of the
torture suite.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
import sqlalchemy as sa

BINARY_CANDIDATES = ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer")


def pgbouncer_binary() -> str | None:
    for candidate in BINARY_CANDIDATES:
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("pgbouncer")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PgBouncer:
    """One pgbouncer process; `url_for(server_url)` rewrites a server URL to go through it."""

    def __init__(
        self,
        server_host: str = "127.0.0.1",
        server_port: int = 5432,
        *,
        users: tuple[str, ...] = ("root", "postgres"),
        default_pool_size: int = 20,
        max_client_conn: int = 500,
    ) -> None:
        binary = pgbouncer_binary()
        if binary is None:
            raise FileNotFoundError("pgbouncer binary not found (apt-get install pgbouncer)")
        self.binary = binary
        self.server_host = server_host
        self.server_port = server_port
        self.users = users
        self.default_pool_size = default_pool_size
        self.max_client_conn = max_client_conn
        self.port = _free_port()
        self.root = Path(tempfile.mkdtemp(prefix="jobdesk-pgbouncer-"))
        self.log = self.root / "pgbouncer.log"
        self.process: subprocess.Popen[bytes] | None = None
        self._as_postgres = os.geteuid() == 0
        atexit.register(self.stop)

    def _ini(self) -> str:
        return "\n".join(
            [
                "[databases]",
                f"* = host={self.server_host} port={self.server_port}",
                "[pgbouncer]",
                "listen_addr = 127.0.0.1",
                f"listen_port = {self.port}",
                f"unix_socket_dir = {self.root}",
                "auth_type = trust",
                f"auth_file = {self.root / 'userlist.txt'}",
                # Stock transaction pooling: a server connection serves a client for one
                # transaction, then the next client; no reset query runs in between.
                "pool_mode = transaction",
                f"default_pool_size = {self.default_pool_size}",
                f"max_client_conn = {self.max_client_conn}",
                f"logfile = {self.log}",
                f"pidfile = {self.root / 'pgbouncer.pid'}",
                "admin_users = postgres",
                # After a failed server login (a restart) retry within a second, not 15.
                "server_login_retry = 1",
                "",
            ]
        )

    def start(self) -> PgBouncer:
        (self.root / "userlist.txt").write_text("".join(f'"{u}" ""\n' for u in self.users))
        (self.root / "pgbouncer.ini").write_text(self._ini())
        command = [self.binary, str(self.root / "pgbouncer.ini")]
        if self._as_postgres:  # pgbouncer refuses to run as root
            entry = pwd.getpwnam("postgres")
            for path in (self.root, *self.root.iterdir()):
                os.chown(path, entry.pw_uid, entry.pw_gid)
            command = ["runuser", "-u", "postgres", "--", *command]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited at start: {self.log_tail()}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5),
            ):
                return self
            time.sleep(0.05)
        raise RuntimeError(f"pgbouncer not listening after 15 s: {self.log_tail()}")

    def url_for(self, server_url: str) -> str:
        """The same database and user, through this PgBouncer."""
        url = sa.make_url(server_url).set(host="127.0.0.1", port=self.port)
        return url.render_as_string(hide_password=False)

    def admin(self, command: str) -> list[tuple[object, ...]]:
        """Run a command on PgBouncer's admin console (`SHOW POOLS`, `RECONNECT` …)."""
        dsn = f"host=127.0.0.1 port={self.port} user=postgres dbname=pgbouncer"
        with psycopg.connect(dsn, autocommit=True, prepare_threshold=None) as conn:
            cursor = conn.execute(command)  # type: ignore[arg-type]
            return cursor.fetchall() if cursor.description else []

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            # runuser passes SIGTERM on to pgbouncer (immediate shutdown).
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)
