"""A private PostgreSQL instance the chaos run may restart, pause and abuse.

Other work shares the machine's cluster on port 5432; it is never touched. This module
`initdb`s a throw-away data directory, starts a postmaster on a free port with its own
socket directory, and offers the faults: fast restart, immediate stop + start, SIGSTOP
of the postmaster and every backend (a frozen database host), `pg_terminate_backend`,
and every connection slot taken by idle sessions (`exhaust`/`release`).
`teardown()` stops it and deletes the directory; it is registered with `atexit` so a
crashed driver does not leave a postmaster behind.
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

BIN_DIRS = (
    "/usr/lib/postgresql/15/bin",
    "/usr/lib/postgresql/16/bin",
    "/usr/lib/postgresql/17/bin",
)
DATABASE = "chaos"
#: The driver's own sessions carry this name so terminating "the workers' backends"
#: never cuts the driver's enqueue or check connections.
DRIVER_APP = "chaos-driver"
#: The idle sessions that exhaust `max_connections`.
HOG_APP = "chaos-hog"


def _bin_dir() -> Path:
    for candidate in BIN_DIRS:
        if (Path(candidate) / "initdb").exists():
            return Path(candidate)
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    raise RuntimeError("PostgreSQL server binaries (initdb, pg_ctl) not found")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivatePostgres:
    def __init__(
        self, network: tuple[str, str] | None = None, settings: dict[str, str] | None = None
    ) -> None:
        """`network` = (address, CIDR): also listen on that address and trust clients
        from that subnet (the worker hosts of `tests.chaos.netlab`). `settings`: more
        server settings (`-c name=value`), e.g. for a benchmark."""
        self.network = network
        self.settings = settings or {}
        self.bin = _bin_dir()
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="jobdesk-chaos-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self._as_postgres = os.geteuid() == 0
        self._paused: list[int] = []
        self._hogs: list[psycopg.Connection[tuple[object, ...]]] = []
        self._torn_down = False
        if self._as_postgres:
            entry = pwd.getpwnam("postgres")
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        atexit.register(self.teardown)

    # ------------------------------------------------------------------ plumbing
    def _run(self, *args: str, check: bool = True, timeout: float = 60) -> str:
        command = [str(self.bin / args[0]), *args[1:]]
        if self._as_postgres:  # initdb and the postmaster refuse to run as root
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(
                f"{args[0]} failed ({done.returncode}): {done.stderr.strip() or done.stdout}"
            )
        return done.stdout

    @property
    def url(self) -> str:
        return self.url_at("127.0.0.1")

    def url_at(self, host: str, port: int | None = None) -> str:
        return f"postgresql+psycopg://postgres@{host}:{port or self.port}/{DATABASE}"

    def _dsn(self, database: str = DATABASE, app: str = DRIVER_APP) -> str:
        return (
            f"host=127.0.0.1 port={self.port} user=postgres dbname={database} "
            f"application_name={app} connect_timeout=2"
        )

    # ------------------------------------------------------------------ lifecycle
    def setup(self) -> PrivatePostgres:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync")
        if self.network:
            with (self.data / "pg_hba.conf").open("a") as hba:
                hba.write(f"host all all {self.network[1]} trust\n")
        self.start()
        with psycopg.connect(self._dsn("postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {DATABASE}")
        return self

    def _options(self) -> str:
        listen = "127.0.0.1" + (f",{self.network[0]}" if self.network else "")
        settings = {"max_connections": "300", **self.settings}
        return (
            f"-p {self.port} -k {self.root} -c listen_addresses={listen} -c fsync=on "
            "-c shared_buffers=32MB"
        ) + "".join(f" -c {name}={value}" for name, value in settings.items())

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", self._options(),
                  "-w", "-t", "60", "start")  # fmt: skip

    def restart_fast(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", self._options(),
                  "-m", "fast", "-w", "-t", "60", "restart")  # fmt: skip

    def stop_immediate(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def restart_immediate(self) -> None:
        self.stop_immediate()
        self.start()

    def accepting(self) -> bool:
        try:
            with psycopg.connect(self._dsn(), autocommit=True) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error:
            return False
        return True

    def wait_accepting(self, timeout: float = 30.0) -> float:
        """Poll until a new session works; returns the wall-clock time it first did."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.accepting():
                return time.time()
            time.sleep(0.05)
        raise RuntimeError(f"private PostgreSQL not accepting connections after {timeout}s")

    # ------------------------------------------------------------------ faults
    def postmaster_pid(self) -> int:
        return int((self.data / "postmaster.pid").read_text().splitlines()[0])

    def _children(self, parent: int) -> list[int]:
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            # pid (comm) state ppid ...: comm may contain spaces, so split after ')'.
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == parent:
                pids.append(int(entry.name))
        return pids

    @property
    def paused(self) -> bool:
        return bool(self._paused)

    def pause(self) -> int:
        """SIGSTOP the postmaster, then every process it started; returns how many."""
        postmaster = self.postmaster_pid()
        os.kill(postmaster, signal.SIGSTOP)
        self._paused = [postmaster]
        for pid in self._children(postmaster):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
                self._paused.append(pid)
        return len(self._paused)

    def resume(self) -> None:
        for pid in reversed(self._paused):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        self._paused = []

    def terminate_backends(self, conn: psycopg.Connection[tuple[object, ...]] | None = None) -> int:
        """`pg_terminate_backend` every client session except the driver's own (and
        the idle sessions exhausting the server); on `conn` when given."""
        if conn is None:
            with psycopg.connect(self._dsn(), autocommit=True) as own:
                return self.terminate_backends(own)
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() "
            "AND coalesce(application_name, '') NOT IN (%s, %s)",
            (DRIVER_APP, HOG_APP),
        ).fetchone()
        return int(row[0]) if row else 0

    def admin_connection(self) -> psycopg.Connection[tuple[object, ...]]:
        """A session of the driver's own (never terminated by the faults)."""
        return psycopg.connect(self._dsn(), autocommit=True)

    def exhaust(self, limit: int = 2000) -> int:
        """Open idle sessions until the server refuses one (every slot taken, the
        superuser reserve too); returns how many are held."""
        while len(self._hogs) < limit:
            try:
                self._hogs.append(psycopg.connect(self._dsn(app=HOG_APP), autocommit=True))
            except psycopg.OperationalError as exc:
                if "too many clients" in str(exc) or "remaining connection slots" in str(exc):
                    return len(self._hogs)
                raise
        return len(self._hogs)

    def hog(self) -> psycopg.Connection[tuple[object, ...]]:
        """One of the idle sessions `exhaust` holds (a session to work on while no new
        one can be opened)."""
        return self._hogs[0]

    def release(self) -> None:
        """Close the idle sessions `exhaust` opened."""
        hogs, self._hogs = self._hogs, []
        for conn in hogs:
            with contextlib.suppress(Exception):
                conn.close()

    def teardown(self) -> None:
        if self._torn_down:
            return
        self._torn_down = True
        self.resume()
        self.release()
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(Exception):
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop",
                          check=False, timeout=30)  # fmt: skip
        shutil.rmtree(self.root, ignore_errors=True)
