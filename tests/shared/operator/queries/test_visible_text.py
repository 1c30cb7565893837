"""What a reader sees of stored text: the stack cut, the hidden address runs and the
refused exact filters — and that the hiding is at least the pages' masking."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobdesk import ValidationError
from jobdesk.shared.core.masking import mask_email
from jobdesk.shared.operator.filters import AuditFilters, JobFilters
from jobdesk.shared.operator.queries.visible_text import (
    hide_address_runs,
    refuse_masked_value,
    searchable_error,
    stack_start,
)

#: The pattern `stack_start` replaces: its answers are the reference.
_OLD_STACK_START = re.compile(r'^(?:Traceback \(most recent call last\):|\s+File ")', re.MULTILINE)

_ERROR_PIECES = st.sampled_from(
    [
        *("\n", " ", "\t", "\x0b", "\u2028", "\u00a0", 'File "', "File", '"', "x", "é"),
        *("Traceback (most recent call last):", "Traceback", "ValueError: bad"),
    ]
)


@settings(max_examples=500, deadline=None)
@given(pieces=st.lists(_ERROR_PIECES, max_size=30))
def test_the_stack_starts_where_the_old_pattern_said(pieces: list[str]) -> None:
    text = "".join(pieces)
    found = _OLD_STACK_START.search(text)
    assert stack_start(text) == (found.start() if found else None)


@pytest.mark.parametrize(
    "text",
    [
        "\n" * 256 * 1024,  # ~10 s with the old pattern per 40,000 characters
        " \n" * 128 * 1024,
        "\n " * 128 * 1024 + "File",
        ' File "' * 36 * 1024,
        "x" + "\nTraceback" * 25 * 1024,
    ],
)
def test_finding_the_stack_is_linear(text: str) -> None:
    started = time.perf_counter()
    stack_start(text)
    searchable_error(text)
    assert time.perf_counter() - started < 0.5


def test_hiding_address_runs() -> None:
    assert hide_address_runs("to ana.lopez@example.com") == "to a***@example.com"
    assert hide_address_runs("a@b.c and x@") == "a***@b.c and x***@"
    assert hide_address_runs("@lead a@@b") == "@lead a***@@b"
    assert hide_address_runs("no address") == "no address"
    assert searchable_error('Err: ana@x.io\n  File "a.py", line 1') == "Err: a***@x.io\n  "
    assert searchable_error("Traceback (most recent call last):\n  …") == ""
    assert searchable_error(None) is None


_MAIL_TEXT = st.text(alphabet="ab.-_+%@ xé\n1", max_size=60)


@settings(max_examples=500, deadline=None)
@given(text=_MAIL_TEXT)
def test_what_the_search_sees_the_page_shows(text: str) -> None:
    """Every piece of the searchable text (the `***` aside) is on the page as a viewer
    sees it: the search hides at least what `mask_email` hides."""
    searchable = hide_address_runs(text)
    shown = mask_email(text)
    for piece in searchable.split("***"):
        for start in range(len(piece)):
            for end in range(start + 1, min(len(piece), start + 8) + 1):
                assert piece[start:end] in shown, (text, piece[start:end])


def test_exact_filters_refuse_what_the_reader_sees_masked() -> None:
    assert refuse_masked_value("key", "order-1001", mask_emails=True) == "order-1001"
    assert refuse_masked_value("key", None, mask_emails=True) is None
    assert refuse_masked_value("key", "ana@example.com", mask_emails=False) == "ana@example.com"
    with pytest.raises(ValidationError, match="email address"):
        refuse_masked_value("key", "ana@example.com", mask_emails=True)
    for mask_emails in (False, True):
        with pytest.raises(ValidationError, match="a secret"):
            refuse_masked_value("group", "x?api_key=abcdef", mask_emails=mask_emails)
    with pytest.raises(ValidationError) as caught:
        JobFilters.from_args({"group": "user:ana@example.com"}, mask_emails=True)
    assert caught.value.field == "group"
    with pytest.raises(ValidationError) as caught:
        AuditFilters.from_args({"actor": "ana@example.com"}, (), mask_emails=True)
    assert caught.value.field == "actor"
    # The role is not a URL parameter: it never shows in the filters' arguments.
    filters = JobFilters.from_args({"error": "timeout"}, mask_emails=True)
    assert filters.mask_emails
    assert filters.to_args() == {"error": "timeout"}
