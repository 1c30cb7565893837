"""`import jobdesk` loads each public name on first use: the package and the `jobdesk`
command start without SQLAlchemy or psycopg (`jobdesk --help` in well under a tenth of
a second), and every name still comes from the module that owns it."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import jobdesk


def test_importing_the_package_and_the_command_loads_no_database_library() -> None:
    probe = (
        "import sys, jobdesk, jobdesk.cli\n"
        "heavy = sorted(m for m in ('sqlalchemy', 'psycopg', 'flask') if m in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == ""


def test_every_public_name_is_its_owners_object() -> None:
    for name in jobdesk.__all__:
        value = getattr(jobdesk, name)
        owner = importlib.import_module(jobdesk._OWNERS[name])
        assert value is getattr(owner, name), name
    assert set(jobdesk.__all__) <= set(dir(jobdesk))
    namespace: dict[str, object] = {}
    exec("from jobdesk import *", namespace)
    assert {"enqueue", "NewJob", "job", "wait_async"} <= set(namespace)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="enqueue_later"):
        jobdesk.enqueue_later  # type: ignore[attr-defined]  # noqa: B018
