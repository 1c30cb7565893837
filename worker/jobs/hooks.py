"""Hooks the app provides so payloads can stay references.

- `set_recipient_resolver(fn)`: `fn(user_id) -> Recipient | str | None` turns
  `{"to_user_id": 42}` into an address (plus template context such as the name) at
  send time. `None` means the user no longer exists: the email job goes to `dead`
  ("deleted user") instead of retrying.
- `set_data_resolver(fn)`: `fn(event, data_ref) -> dict` builds a webhook's `data` from
  `{"data_ref": {...}}` at delivery time. Without a resolver, `data_ref` is sent as is.

Register them in the job module the worker loads (`JOBDESK_JOB_MODULES`), e.g.::

    from jobdesk.worker.jobs import Recipient, set_recipient_resolver

    def find_user(user_id):
        user = db.get_user(user_id)
        return None if user is None else Recipient(user.email, {"name": user.name})

    set_recipient_resolver(find_user)

A resolver that raises (database down) makes the attempt fail and retry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Recipient:
    email: str
    context: Mapping[str, Any] = field(default_factory=dict)
    """Extra template variables (e.g. `name`)."""


RecipientResolver = Callable[[int], "Recipient | str | None"]
DataResolver = Callable[[str, dict[str, Any]], Mapping[str, Any]]


class NoResolverError(LookupError):
    """A payload needs a resolver that the app did not register."""


_hooks: dict[str, Any] = {"recipient": None, "data": None}


def set_recipient_resolver(fn: RecipientResolver | None) -> None:
    """Install (or with None remove) the app's user-id → recipient lookup."""
    _hooks["recipient"] = fn


def set_data_resolver(fn: DataResolver | None) -> None:
    """Install (or with None remove) the app's webhook `data_ref` → data lookup."""
    _hooks["data"] = fn


def resolve_recipient(user_id: int) -> Recipient | None:
    fn: RecipientResolver | None = _hooks["recipient"]
    if fn is None:
        raise NoResolverError(
            "to_user_id needs a recipient resolver (jobdesk.worker.jobs.set_recipient_resolver)"
        )
    found = fn(user_id)
    if found is None or isinstance(found, Recipient):
        return found
    if isinstance(found, str):
        return Recipient(found)
    raise TypeError(f"recipient resolver returned {type(found).__name__}, not Recipient/str")


def resolve_data(event: str, data_ref: dict[str, Any]) -> dict[str, Any] | None:
    """The webhook's data for `data_ref`, or None when no resolver is installed."""
    fn: DataResolver | None = _hooks["data"]
    if fn is None:
        return None
    data = fn(event, data_ref)
    if not isinstance(data, Mapping):
        raise TypeError(f"data resolver returned {type(data).__name__}, not a mapping")
    return dict(data)
