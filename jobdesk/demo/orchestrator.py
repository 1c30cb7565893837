"""`jobdesk demo`: start everything, play the story, keep it up for triage, stop cleanly.

One process owns the demo: the SMTP sink, the demo console (CRM receiver + inbox page),
the dashboard (served in-process on 127.0.0.1) and the story. The worker is a real
`jobdesk worker` subprocess — the same program production runs — started with the
demo's settings and its job module (`jobdesk.demo.jobs`).

Stopping: SIGINT (Ctrl-C) or SIGTERM sets one event; the story and narrator stop, the
worker gets SIGTERM (graceful: running jobs finish or are released) and is killed only
if it overstays, then the servers close. The worker runs in its own session so a
terminal's Ctrl-C reaches it once, through us, and on Linux it is also told to exit
if the demo process dies without cleaning up.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TextIO

import sqlalchemy as sa
from werkzeug.serving import BaseWSGIServer, make_server

from jobdesk.demo import story
from jobdesk.demo.lock import DirectoryBusy, DirectoryLock
from jobdesk.demo.narrator import Narrator
from jobdesk.demo.sinks import Crm, DemoConsole, MailSink, free_port, port_is_free
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.db import make_engine
from jobdesk.shared.migrate import upgrade
from jobdesk.shared.operator.commands import accounts as operators
from jobdesk.shared.operator.queries.stats import counts_by_status_queue_type
from jobdesk.shared.settings import PREFIX, Settings
from jobdesk.shared.webhooks import endpoints

DEMO_USERNAME = "demo"
DEFAULT_DIRECTORY = "jobdesk-demo"
WORKER_STOP_SECONDS = 15.0
#: The production webhook schedule (1 min, 5 min, 30 min, 2 h) in demo seconds.
DEMO_BACKOFF_SECONDS = (2.0, 4.0, 8.0, 16.0)
MIN_SPEED, MAX_SPEED = 0.1, 10.0
MAX_USERS = 200


class DemoError(RuntimeError):
    """The demo cannot start; the message says why and what to do."""


@dataclass(frozen=True)
class DemoOptions:
    port: int = 8000
    users: int = 8
    keep: bool = False
    postgres_url: str | None = None
    speed: float = 1.0
    directory: Path = field(default_factory=lambda: Path(DEFAULT_DIRECTORY))
    #: Read "press Enter to bring the CRM back" from stdin (only when it is a terminal).
    interactive: bool = True

    def check(self) -> None:
        if not 1 <= self.port <= 65534:
            raise DemoError(f"--port: must be between 1 and 65534, got {self.port}")
        if not 1 <= self.users <= MAX_USERS:
            raise DemoError(f"--users: must be between 1 and {MAX_USERS}, got {self.users}")
        if not MIN_SPEED <= self.speed <= MAX_SPEED:
            raise DemoError(f"--speed: must be between {MIN_SPEED} and {MAX_SPEED}")
        if self.postgres_url is not None and not self.postgres_url.startswith("postgres"):
            raise DemoError("--postgres: expected a URL like postgresql+psycopg://user@host/db")


def _scaled(seconds: float, speed: float) -> float:
    return round(max(seconds / speed, 0.1), 2)


class Demo:
    """The whole demo; `run()` blocks until stopped and returns the exit status."""

    def __init__(self, options: DemoOptions, out: TextIO | None = None) -> None:
        options.check()
        self.options = options
        self._out = out or sys.stdout
        self._print_lock = threading.Lock()
        self.stop = threading.Event()
        self.directory = options.directory.resolve()
        self.database_url = options.postgres_url or f"sqlite:///{self.directory / 'jobdesk.db'}"
        self.dashboard_url = f"http://127.0.0.1:{options.port}"
        self.password = _demo_password()
        self._cleanups: list[Callable[[], None]] = []
        self.worker: subprocess.Popen[bytes] | None = None
        self.console: DemoConsole | None = None
        self.narrator: Narrator | None = None
        self.exit_code = 0

    # -- output ----------------------------------------------------------------------------

    def say(self, line: str = "") -> None:
        with self._print_lock:
            self._out.write(line + "\n")
            self._out.flush()

    # -- settings --------------------------------------------------------------------------

    def demo_env(self, smtp_url: str) -> dict[str, str]:
        """The worker's and dashboard's JOBDESK_* settings for the demo."""
        speed = self.options.speed
        backoff = ",".join(f"{_scaled(s, speed):g}" for s in DEMO_BACKOFF_SECONDS)
        return {
            "JOBDESK_DATABASE_URL": self.database_url,
            "JOBDESK_SECRET_KEY": secrets.token_urlsafe(48),
            "JOBDESK_SMTP_URL": smtp_url,
            "JOBDESK_MAIL_FROM": "welcome@example.com",
            "JOBDESK_ALLOW_PRIVATE_WEBHOOK_TARGETS": "1",
            "JOBDESK_DEMO_WEBHOOK_BACKOFF": backoff,
            "JOBDESK_WEBHOOK_TIMEOUT_SECONDS": "1",
            "JOBDESK_WEBHOOK_CONNECT_TIMEOUT_SECONDS": "1",
            # The breaker would (rightly) hold the CRM's jobs without burning attempts;
            # the demo wants each job to walk its own schedule to `dead` within a minute.
            "JOBDESK_BREAKER_THRESHOLD": "1000",
            "JOBDESK_SMTP_TIMEOUT_SECONDS": "5",
            "JOBDESK_POLL_INTERVAL_SECONDS": "0.5",
            "JOBDESK_LEASE_SECONDS": "10",
            "JOBDESK_REAPER_INTERVAL_SECONDS": "2",
            "JOBDESK_SHUTDOWN_TIMEOUT_SECONDS": "5",
            "JOBDESK_JOB_MODULES": "jobdesk.demo.jobs",
            "JOBDESK_REPORT_CHUNK_ROWS": "2",
            "JOBDESK_REPORTS_DIR": str(self.directory / "reports"),
            "JOBDESK_ALERT_INTERVAL_SECONDS": str(_scaled(2.0, speed)),
            "JOBDESK_ALERT_DEAD_LETTER_SPIKE_MIN_COUNT": "3",
            "JOBDESK_ALERT_REPEATED_ERROR_MIN_JOBS": "3",
            "JOBDESK_ALERT_EMAIL": "oncall@example.com",
            "JOBDESK_ALERT_DASHBOARD_URL": self.dashboard_url,
        }

    # -- steps -----------------------------------------------------------------------------

    def prepare_directory(self) -> None:
        """The demo's folder, ignored by git whatever checkout it lands in."""
        self.directory.mkdir(parents=True, exist_ok=True)
        ignore = self.directory / ".gitignore"
        if not ignore.exists():
            ignore.write_text("# made by `jobdesk demo`: nothing here belongs in a repository\n*\n")

    def prepare_database(self, settings: Settings) -> sa.Engine:
        self.prepare_directory()
        if self.options.postgres_url is None:
            if not self.options.keep:
                for suffix in ("", "-wal", "-shm", "-journal"):
                    (self.directory / f"jobdesk.db{suffix}").unlink(missing_ok=True)
                shutil.rmtree(self.directory / "reports", ignore_errors=True)
        else:
            self.directory.mkdir(parents=True, exist_ok=True)
        engine = make_engine(settings=settings, application_name="jobdesk-demo")
        self._cleanups.append(engine.dispose)
        upgrade(engine)
        with engine.connect() as conn:
            used = bool(counts_by_status_queue_type(conn)) or story.has_users(conn)
        if used and not self.options.keep:
            raise DemoError(
                "the PostgreSQL database already holds jobs or demo users; give the demo an "
                "empty database of its own (e.g. `createdb jobdesk_demo`) or pass --keep to "
                "continue an earlier demo there"
            )
        story.create_tables(engine)
        return engine

    def prepare_operator(self, engine: sa.Engine) -> None:
        with engine.begin() as conn:
            now = db_now(conn)
            if operators.get_operator(conn, DEMO_USERNAME) is None:
                operators.add_operator(
                    conn, DEMO_USERNAME, self.password, "admin", now=now, actor="demo"
                )
            else:
                operators.set_password(conn, DEMO_USERNAME, self.password, now=now, actor="demo")

    def prepare_endpoint(self, engine: sa.Engine, url: str) -> str:
        """Register (or re-point) endpoint `crm`; returns its signing secret."""
        with engine.begin() as conn:
            now = db_now(conn)
            existing = endpoints.get_endpoint(conn, story.CRM_ENDPOINT)
            if existing is None:
                return endpoints.add_endpoint(
                    conn, story.CRM_ENDPOINT, url, allow_private=True, now=now, actor="demo"
                )
            if existing.url != url:
                endpoints.set_endpoint_url(
                    conn, story.CRM_ENDPOINT, url, allow_private=True, now=now, actor="demo"
                )
            return existing.secret

    def start_worker(self, env: dict[str, str]) -> subprocess.Popen[bytes]:
        log_path = self.directory / "worker.log"
        log = log_path.open("ab")
        self._cleanups.append(log.close)
        script = Path(sys.executable).with_name("jobdesk")
        command = (
            [str(script)]
            if script.exists()
            else [sys.executable, "-c", "from jobdesk.cli import main; main()"]
        )
        command += ["worker", "--concurrency", "8"]
        child_env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIX)}
        child_env.update(env)
        child_env.pop("JOBDESK_SECRET_KEY", None)  # the worker has no use for it
        return subprocess.Popen(
            command,
            env=child_env,
            cwd=self.directory,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_exit_with_parent if sys.platform == "linux" else None,  # noqa: PLW1509
        )

    def start_dashboard(self, settings: Settings) -> BaseWSGIServer:
        from jobdesk.dashboard import create_app

        app = create_app(settings)
        # One line per request would drown the narration: requests go to a log file.
        access = logging.getLogger("werkzeug")
        handler = logging.FileHandler(self.directory / "dashboard.log")
        access.addHandler(handler)
        access.propagate = False

        def close_access_log() -> None:
            access.removeHandler(handler)
            handler.close()

        self._cleanups.append(close_access_log)
        try:
            server = make_server("127.0.0.1", self.options.port, app, threaded=True)
        except OSError as exc:
            raise DemoError(
                f"cannot serve the dashboard on 127.0.0.1:{self.options.port} ({exc.strerror}); "
                "pass another --port"
            ) from None
        thread = threading.Thread(target=server.serve_forever, name="dashboard", daemon=True)
        thread.start()

        def close() -> None:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)

        self._cleanups.append(close)
        return server

    def play(self, engine: sa.Engine, narrator: Narrator) -> None:
        """The story: sign-ups (one transaction each), then the nightly report."""
        users = self.options.users
        narrator.planned(users)
        pace = _scaled(0.4, self.options.speed)
        with engine.connect() as conn:
            first = story.count_users(conn)
        for index in range(first, first + users):
            if self.stop.is_set():
                return
            name, email, plan = story.person(index)
            with engine.begin() as conn:
                done = story.sign_up(conn, name=name, email=email, plan=plan, now=db_now(conn))
            narrator.signed_up()
            self.say(
                f"  signed up {name} <{email}> ({plan}) → user #{done.user_id}: "
                f"welcome email job #{done.email_job_id}, CRM webhook job #{done.crm_job_id}, "
                "activity row for the nightly report — one transaction"
            )
            if self.stop.wait(pace):
                return
        with engine.begin() as conn:
            today = db_now(conn).date()
            job_id = story.request_nightly_report(conn, today)
        narrator.report_requested(job_id)
        self.say(f"  nightly sign-up report for {today} requested → job #{job_id}")

    def triage_hint(self) -> str:
        console = self.console.url if self.console else ""
        base = self.dashboard_url
        return "\n".join(
            [
                "",
                "  The CRM webhooks are dead. Time to triage, as support would:",
                f"    1. dead letters:        {base}/dead",
                f"    2. search the error:    {base}/jobs?status=dead&type=webhook.deliver"
                "&error=endpoint+crm",
                f"    3. bring the CRM back:  the button on {console}/"
                + (" (or press Enter here)" if self._interactive() else "")
                + f", or: curl -X POST {console}/crm/up",
                "    4. retry the dead jobs from the dashboard and watch them succeed",
                "",
            ]
        )

    def _interactive(self) -> bool:
        return self.options.interactive and sys.stdin is not None and sys.stdin.isatty()

    def _read_enter(self) -> None:
        for _line in sys.stdin:
            if self.console is not None and not self.console.crm.up:
                self.console.set_crm(True)

    # -- run -------------------------------------------------------------------------------

    def run(self) -> int:
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        for sig in previous:
            signal.signal(sig, self._on_signal)
        try:
            self._start_and_wait()
        finally:
            self.shutdown()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return self.exit_code

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        del frame
        if self.stop.is_set():
            return
        self.say(f"\n{signal.Signals(signum).name}: stopping the demo …")
        self.stop.set()

    def lock_directory(self) -> None:
        """Refuse to share the directory with a running demo (it would delete this one's
        database, or this one its); the lock lasts as long as this process."""
        self.directory.mkdir(parents=True, exist_ok=True)
        lock = DirectoryLock(self.directory)
        try:
            lock.acquire(f"pid {os.getpid()}, dashboard {self.dashboard_url}/")
        except DirectoryBusy as exc:
            raise DemoError(str(exc)) from None
        self._cleanups.append(lock.release)

    def _start_and_wait(self) -> None:
        options = self.options
        self.lock_directory()
        if not port_is_free(options.port):
            raise DemoError(
                f"cannot serve the dashboard on 127.0.0.1:{options.port}: the port is in use; "
                "pass another --port"
            )
        console_port = options.port + 1
        if not port_is_free(console_port):
            console_port = free_port()
        smtp_port = free_port()
        env = self.demo_env(f"smtp://127.0.0.1:{smtp_port}")
        settings = Settings.from_env(env)
        where = options.postgres_url and _hide_password(options.postgres_url)
        self.say(f"Jobdesk demo — database: {where or self.database_url}")
        engine = self.prepare_database(settings)
        self.prepare_operator(engine)
        console_url = f"http://127.0.0.1:{console_port}"
        secret = self.prepare_endpoint(engine, f"{console_url}/crm/webhooks")

        # Fork the worker before this process starts any thread (preexec_fn safety).
        self.worker = self.start_worker(env)
        self.say(
            f"  worker started (pid {self.worker.pid}); its log: {self.directory / 'worker.log'}"
        )
        sink = MailSink(smtp_port)
        sink.start()
        self._cleanups.append(sink.stop)
        sink.set_listener(
            lambda mail: self.say(f"  mail → {', '.join(mail.recipients)}: {mail.subject}")
        )
        crm = Crm(secret)
        console = DemoConsole(crm, sink, port=console_port, dashboard_url=self.dashboard_url)
        console.on_crm_change = lambda up: self.say(
            "  CRM is back up: retry its dead jobs in the dashboard"
            if up
            else "  CRM is down again"
        )
        self.console = console
        console.start()
        self._cleanups.append(console.stop)
        self.start_dashboard(settings)

        narrator = Narrator(engine, self.say, interval=1.0, triage_hint=self.triage_hint)
        self.narrator = narrator
        console.status_provider = narrator.status
        self._banner(console.url)
        narrator.start()
        self._cleanups.append(narrator.stop.set)
        if self._interactive():
            threading.Thread(target=self._read_enter, name="demo-stdin", daemon=True).start()
        player = threading.Thread(
            target=self.play, args=(engine, narrator), name="demo-story", daemon=True
        )
        player.start()
        while not self.stop.wait(0.5):
            code = self.worker.poll()
            if code is not None:
                self.say(
                    f"The worker exited unexpectedly (status {code}); "
                    f"see {self.directory / 'worker.log'}"
                )
                self.exit_code = 1
                self.stop.set()
        player.join(timeout=5)

    def _banner(self, console_url: str) -> None:
        backoff = ", ".join(f"{_scaled(s, self.options.speed):g} s" for s in DEMO_BACKOFF_SECONDS)
        self.say("")
        self.say(f"  Dashboard:     {self.dashboard_url}/")
        self.say(f"  Log in as:     {DEMO_USERNAME}")
        self.say(f"  Password:      {self.password}")
        self.say(f"  Demo console:  {console_url}/   (inbox + the CRM, which is DOWN)")
        self.say(
            f"  Demo timing:   CRM retries after {backoff} (production: 1 min, 5 min, "
            "30 min, 2 h), dead after 5 attempts"
        )
        self.say(
            f"  Nightly report: schedule {story.NIGHTLY_SCHEDULE} ({story.NIGHTLY_CRON} UTC), "
            f"{self.dashboard_url}/schedules; tonight's run is requested by the story"
        )
        self.say("  Stop:          Ctrl-C")
        self.say("")

    def shutdown(self) -> None:
        self.stop.set()
        if self.worker is not None and self.worker.poll() is None:
            self.worker.send_signal(signal.SIGTERM)
            try:
                self.worker.wait(WORKER_STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self.say("  the worker did not stop in time; killing it")
                self.worker.kill()
                self.worker.wait()
        for cleanup in reversed(self._cleanups):
            try:
                cleanup()
            except Exception as exc:
                self.say(f"  (while stopping: {type(exc).__name__}: {exc})")
        self._cleanups.clear()
        if self.worker is not None:
            self.say(
                "Demo stopped. Its files are in "
                f"{self.directory}; `jobdesk demo --keep` continues from them."
            )
            self.worker = None


def _exit_with_parent() -> None:
    """In the forked worker: get SIGTERM if the demo process dies (Linux prctl)."""
    import ctypes

    pr_set_pdeathsig = 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(pr_set_pdeathsig, signal.SIGTERM)


def _demo_password() -> str:
    """A random password the account rules accept (one in thousands of random strings
    holds the username `demo`)."""
    from jobdesk.shared.core.errors import ValidationError
    from jobdesk.shared.operator.passwords import check_password

    while True:
        password = secrets.token_urlsafe(12)
        try:
            return check_password(password, username=DEMO_USERNAME)
        except ValidationError:
            continue


def _hide_password(url: str) -> str:
    return str(sa.engine.make_url(url).render_as_string(hide_password=True))
