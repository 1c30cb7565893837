"""Per-delivery secret headers: a `webhook.deliver` job's secrets named `header.<Name>`
are sent as request header `<Name>` — an endpoint that wants a bearer token or an API key
of its own per call, beside the Standard Webhooks signature::

    enqueue(conn, "webhook.deliver", {"endpoint": "crm", "event": "user.created", ...},
            secrets={"header.Authorization": "Bearer …"})

The value is stored sealed like every secret and opened only for the POST; it appears
in no log line, error or delivery record. A name that is not an HTTP header token, a
header the delivery sets itself (the signature, `content-type`, `traceparent`, …) or a
value with a line break is refused when the job runs (`dead`, naming the secret, never
its value): it would forge the request or split it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

#: The secret-name prefix that makes a secret a request header.
SECRET_HEADER_PREFIX = "header."  # noqa: S105 (a name prefix)

#: Headers a delivery sets itself: a secret may not replace them.
RESERVED = frozenset(
    {
        "connection",
        "content-length",
        "content-type",
        "host",
        "traceparent",
        "tracestate",
        "transfer-encoding",
        "user-agent",
        "webhook-id",
        "webhook-signature",
        "webhook-timestamp",
    }
)
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


class SecretHeaderError(ValueError):
    """A header secret that cannot be sent; the message names the secret, not its value."""


def secret_headers(secrets: Mapping[str, str]) -> dict[str, str]:
    """The request headers the job's `header.*` secrets ask for."""
    headers: dict[str, str] = {}
    for name, value in secrets.items():
        if not name.startswith(SECRET_HEADER_PREFIX):
            continue
        header = name[len(SECRET_HEADER_PREFIX) :]
        if not _TOKEN.match(header):
            raise SecretHeaderError(f"secret {name!r} does not name an HTTP header")
        if header.lower() in RESERVED:
            raise SecretHeaderError(
                f"secret {name!r} would replace a header the delivery sets itself"
            )
        if "\r" in value or "\n" in value or "\0" in value:
            raise SecretHeaderError(f"secret {name!r} holds a line break in its value")
        headers[header] = value
    return headers
