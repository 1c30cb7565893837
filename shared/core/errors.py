"""Exceptions that cross module boundaries: bad input and the handler-facing error kinds."""

from __future__ import annotations


class JobdeskError(Exception):
    """Base class for errors raised by Jobdesk itself."""


#: What a process that needs the schema (the dashboard, `/readyz`, `jobdesk dashboard`)
#: says of a database `jobdesk migrate` never ran on.
NO_SCHEMA = "The database has no Jobdesk schema: run `jobdesk migrate`"


class SchemaMissingError(JobdeskError):
    """Jobdesk's tables are not in the database the caller is writing to."""

    def __init__(self, detail: str) -> None:
        super().__init__(
            "Jobdesk's tables are not in this database: run `jobdesk migrate` with "
            f"JOBDESK_DATABASE_URL pointing at it first ({detail})"
        )


def missing_schema(exc: BaseException) -> SchemaMissingError | None:
    """A SchemaMissingError for a database error that says a jobdesk_* table is missing."""
    text = str(getattr(exc, "orig", None) or exc)
    first = text.strip().splitlines()[0] if text.strip() else ""
    missing = "no such table" in first or ("does not exist" in first and "relation" in first)
    return SchemaMissingError(first) if missing and "jobdesk_" in first else None


def with_pooler_hint(detail: str) -> str:
    """`detail` of a failed connection, plus what to do when PgBouncer refused the
    connection parameters Jobdesk sends to a PostgreSQL server directly."""
    if "unsupported startup parameter" in detail:
        return (
            f"{detail} (this is PgBouncer: set JOBDESK_PGBOUNCER=1 to connect through it, "
            "see the production guide)"
        )
    return detail


class ValidationError(JobdeskError, ValueError):
    """Input refused before anything was written; `field` names what was wrong."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class PermanentError(JobdeskError):
    """Raised by a handler when retrying cannot help (bad address, 400, deleted account):
    the job goes to `dead` at once without burning its remaining attempts."""


class RetryAfter(JobdeskError):
    """Raised by a handler to retry at a given time (e.g. a provider's `Retry-After`).

    Counts as a failed attempt; the delay is capped by the retry policy.
    """

    def __init__(self, seconds: float, message: str = "") -> None:
        if not seconds >= 0:
            raise ValueError("RetryAfter seconds must be >= 0")
        super().__init__(message or f"retry after {seconds:g}s")
        self.seconds = float(seconds)


class ConflictError(JobdeskError):
    """An operator action lost a race (the job changed since the page was loaded)."""


class NotFoundError(JobdeskError, LookupError):
    """The referenced row does not exist."""


class Snooze(JobdeskError):
    """Raised by a handler to put the job back for `seconds` WITHOUT counting the attempt:
    the destination is paused, its circuit breaker is open, or a rate limit is hit.
    """

    def __init__(self, seconds: float, reason: str = "") -> None:
        if not seconds >= 0:
            raise ValueError("Snooze seconds must be >= 0")
        super().__init__(reason or f"snoozed for {seconds:g}s")
        self.seconds = float(seconds)
        self.reason = reason


class DatabaseUnavailable(Snooze):
    """Jobdesk's own database work inside a handler's attempt (`ctx.once`'s ledger,
    `ctx.progress`, `ctx.reserve`, …) still failed after its retries.

    A `Snooze`: the job goes back to the queue for `seconds` and the attempt is not
    counted — database trouble is not the handler's failure, and must never walk a job
    towards `dead`. The reason names what could not be done and the last error.
    """

    def __init__(self, what: str, error: BaseException, seconds: float) -> None:
        detail = str(getattr(error, "orig", None) or error).strip().splitlines()
        cause = f"{type(error).__name__}: {detail[0]}" if detail else type(error).__name__
        super().__init__(seconds, f"database unavailable during {what} ({cause})")
        self.what = what
