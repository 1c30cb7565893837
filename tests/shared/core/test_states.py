"""The lifecycle table is the only authority on state moves."""

import inspect

from jobdesk.shared.core import claim, decisions, transitions
from jobdesk.shared.core.states import (
    ALLOWED_TRANSITIONS,
    DATABASE_TRANSITIONS,
    FINAL,
    FLOW_TRANSITIONS,
    STATE_KEEPING_WRITES,
    TRANSITIONS,
    JobStatus,
    is_allowed,
)


def test_every_transition_function_stays_inside_the_lifecycle_table() -> None:
    tables = [*TRANSITIONS.items(), *DATABASE_TRANSITIONS.items(), *FLOW_TRANSITIONS.items()]
    for name, (sources, targets) in tables:
        for source in sources:
            for target in targets:
                assert is_allowed(source, target), f"{name}: {source} -> {target} not allowed"


def test_final_states_have_no_way_out() -> None:
    for status in FINAL:
        assert ALLOWED_TRANSITIONS[status] == frozenset()


def test_every_state_is_in_the_table() -> None:
    assert set(ALLOWED_TRANSITIONS) == set(JobStatus)


def test_every_write_of_the_core_is_in_the_transition_tables() -> None:
    """A function that writes jobs and is not in the tables is a state change nobody
    checked against the lifecycle (the drift the tables exist to prevent)."""
    writers = {
        name
        for module in (claim, transitions, decisions)
        for name, fn in inspect.getmembers(module, inspect.isfunction)
        if fn.__module__ == module.__name__ and not name.startswith("_")
    }
    assert writers == set(TRANSITIONS) | set(STATE_KEEPING_WRITES)
    assert not set(TRANSITIONS) & set(STATE_KEEPING_WRITES)
