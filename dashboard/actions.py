"""The one shape of a dashboard POST that changes something: run the command, flash what
happened, answer 303 to the page the operator acted from (its `next`, filters kept) or
to the page the command points at.

A view decorated with `@action(fallback, refused="Endpoint not paused")` returns a
`Done` (the flash and, optionally, where to go). What the command refuses becomes an
error flash, worded the same everywhere: a `ValidationError` as "Endpoint not paused:
the reason must not be empty", a `NotFoundError` or `ConflictError` as "Endpoint not
paused: <its message>" (`catches` narrows that: an error it leaves out reaches the
blueprint's error pages, e.g. a 404 for a job that does not exist). A view that words a
refusal its own way raises `Refused`. A view may still return a response of its own (a
form shown again with its errors). The fallback — where to go when the form names no
page — is an endpoint name, or a function of the view's arguments.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ParamSpec

from flask import redirect, url_for
from werkzeug.wrappers import Response

from jobdesk.dashboard.flashes import note
from jobdesk.dashboard.navigation import back
from jobdesk.shared.core.errors import ConflictError, NotFoundError, ValidationError

P = ParamSpec("P")

#: The errors an action reports as a flash unless told otherwise.
REFUSALS: tuple[type[Exception], ...] = (ValidationError, NotFoundError, ConflictError)


@dataclass(frozen=True)
class Done:
    """What a successful action flashes, and where the operator goes next."""

    text: str
    category: str = "success"
    #: One link in the message (e.g. the new job a retry created).
    href: str | None = None
    link: str | None = None
    #: A fragment URL the message polls (the progress of jobs a bulk action made).
    progress: str | None = None
    #: Go here instead of back to the page the operator acted from.
    to: str | None = None


class Refused(Exception):
    """Nothing changed; `text` says why, exactly as it should be shown."""

    def __init__(self, text: str, *, category: str = "error", to: str | None = None) -> None:
        super().__init__(text)
        self.text = text
        self.category = category
        self.to = to


def refusal(refused: str, exc: Exception) -> str:
    """The flash for a command's refusal: "<refused>: the <field> <message>" for bad
    input, "<refused>: <message>" for a missing row or a lost race."""
    text = (
        f"{refused}: the {exc.field} {exc.message}"
        if isinstance(exc, ValidationError)
        else (f"{refused}: {exc}")
    )
    return text if text.endswith((".", "?", "!")) else text + "."


def action(
    fallback: str | Callable[..., str],
    *,
    refused: str | Callable[..., str],
    catches: tuple[type[Exception], ...] = REFUSALS,
) -> Callable[[Callable[P, Done | Response | Any]], Callable[P, Any]]:
    """Decorate a POST view: see the module docstring. `refused` may take the view's
    arguments (e.g. the username in "ana not disabled")."""

    def decorate(view: Callable[P, Done | Response | Any]) -> Callable[P, Any]:
        @functools.wraps(view)
        def run(*args: P.args, **kwargs: P.kwargs) -> Any:
            def default() -> str:
                if isinstance(fallback, str):
                    return url_for(fallback)
                return fallback(*args, **kwargs)

            try:
                outcome = view(*args, **kwargs)
            except Refused as exc:
                note(exc.text, exc.category)
                return _go(exc.to, default)
            except catches as exc:
                prefix = refused if isinstance(refused, str) else refused(*args, **kwargs)
                note(refusal(prefix, exc), "error")
                return _go(None, default)
            if not isinstance(outcome, Done):
                return outcome
            note(
                outcome.text,
                outcome.category,
                href=outcome.href,
                link=outcome.link,
                progress=outcome.progress,
            )
            return _go(outcome.to, default)

        run.shaped_as_action = True  # type: ignore[attr-defined]  # for the route test
        return run

    return decorate


def _go(to: str | None, fallback: Callable[[], str]) -> Response:
    return redirect(to, code=303) if to is not None else back(fallback())
