"""The dashboard's compiled templates, kept for the life of the process.

Jinja compiles a template the first time an environment loads it, and every
`create_app()` makes a new environment: a process that builds several apps — a test
suite with an app per test, a host that makes one per tenant or per worker thread — would
parse and compile every page again for each. All of them load the same files with the
same settings, so they share one in-memory bytecode cache: an app's first request for a
page the process has compiled before only unmarshals its code. Jinja checks each entry
against the template's source (a checksum), so an edited file is compiled again.
"""

from __future__ import annotations

from jinja2 import BytecodeCache
from jinja2.bccache import Bucket


class ProcessTemplates(BytecodeCache):
    """Compiled templates by Jinja's bucket key (the template's name and file). Bounded by
    the templates the dashboard ships; a dict's get and set need no lock of their own."""

    def __init__(self) -> None:
        self._compiled: dict[str, bytes] = {}

    def load_bytecode(self, bucket: Bucket) -> None:
        compiled = self._compiled.get(bucket.key)
        if compiled is not None:
            bucket.bytecode_from_string(compiled)

    def dump_bytecode(self, bucket: Bucket) -> None:
        self._compiled[bucket.key] = bucket.bytecode_to_string()


#: Shared by every app `create_app` builds in this process.
COMPILED = ProcessTemplates()
