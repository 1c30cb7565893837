"""One demo per directory: two demos given the same `--dir` would delete and rewrite each
other's database, reports and logs.

The running demo holds an exclusive `flock` on `<dir>/demo.lock` for as long as its
process lives. The kernel releases the lock when the process ends, however it ends
(Ctrl-C, a crash, SIGKILL), so a lock is never stale and no pid has to be guessed
alive. The file's text names the holder (its pid and dashboard URL) for the demo that
is refused. Where `fcntl` does not exist (Windows) the directory is not locked.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

LOCK_FILE = "demo.lock"


class DirectoryBusy(RuntimeError):
    """Another live process holds the directory; `holder` is what it wrote there."""

    def __init__(self, directory: Path, holder: str) -> None:
        self.directory = directory
        self.holder = holder
        super().__init__(
            f"another demo is running in {directory} ({holder or 'starting up'}): "
            "stop it first (Ctrl-C in its terminal) or give this one another --dir"
        )


class DirectoryLock:
    """The exclusive lock on a demo directory, released by `release()` or by the
    process's end."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LOCK_FILE
        self._fd: int | None = None

    def acquire(self, holder: str) -> None:
        """Take the lock and write `holder` into the file, or raise `DirectoryBusy`."""
        if fcntl is None:  # pragma: no cover - Windows
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DirectoryBusy(self.path.parent, self._holder()) from None
        os.ftruncate(fd, 0)
        os.write(fd, holder.encode("utf-8"))
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)  # closing the last descriptor releases the flock

    def _holder(self) -> str:
        try:
            return self.path.read_text(encoding="utf-8", errors="replace").strip()[:200]
        except OSError:
            return ""
