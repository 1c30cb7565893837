"""Handlers that end in every way a handler should not (`--jobs tests.worker.jobmods.hostile`):
`SystemExit` from argparse, `KeyboardInterrupt`, `GeneratorExit`, a custom
`BaseException`, and exceptions that cannot be printed."""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import Any

from jobdesk import job
from jobdesk.shared.core.retry import ExponentialBackoff
from jobdesk.worker.context import JobContext

FAST = ExponentialBackoff(base=timedelta(seconds=0.1), cap=timedelta(seconds=0.2))


class Meltdown(BaseException):
    """Not an `Exception`: slips past every `except Exception`."""


class Unprintable(ValueError):
    def __str__(self) -> str:
        raise RuntimeError("this exception cannot be printed")

    def __repr__(self) -> str:
        raise RuntimeError("nor represented")


class UnprintableBase(BaseException):
    def __str__(self) -> str:
        raise Meltdown("str of a BaseException")

    def __repr__(self) -> str:
        raise Meltdown("repr of a BaseException")


def _argparse_exit() -> None:
    parser = argparse.ArgumentParser(prog="report", exit_on_error=True, add_help=False)
    parser.add_argument("--month", required=True)
    parser.error = _quiet_error  # type: ignore[method-assign]
    parser.parse_args([])


def _quiet_error(message: str) -> None:
    """argparse's own `error`, without printing the usage to the worker's stderr."""
    raise SystemExit(2)


def _raise(exc: BaseException) -> None:
    raise exc


RAISES: dict[str, Any] = {
    "system_exit": _argparse_exit,
    "keyboard_interrupt": lambda: _raise(KeyboardInterrupt()),
    "generator_exit": lambda: _raise(GeneratorExit()),
    "custom_base": lambda: _raise(Meltdown("core meltdown")),
    "unprintable": lambda: _raise(Unprintable()),
    "unprintable_base": lambda: _raise(UnprintableBase()),
}

#: What the first line of each one's attempt error says.
EXPECTED: dict[str, str] = {
    "system_exit": "SystemExit: SystemExit(2) raised by the handler",
    "keyboard_interrupt": "KeyboardInterrupt: KeyboardInterrupt() raised by the handler",
    "generator_exit": "GeneratorExit: GeneratorExit() raised by the handler",
    "custom_base": "Meltdown: Meltdown('core meltdown') raised by the handler",
    "unprintable": "Unprintable: <unprintable Unprintable>",
    "unprintable_base": "UnprintableBase: <unprintable UnprintableBase> raised by the handler",
}


@job("t.hostile", backoff=FAST, max_attempts=2)
def hostile(payload: dict[str, Any], ctx: JobContext) -> None:
    RAISES[payload["raises"]]()
