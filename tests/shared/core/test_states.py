"""The lifecycle table is the only authority on state moves."""

from jobdesk.shared.core.states import ALLOWED_TRANSITIONS, FINAL, JobStatus, is_allowed
from jobdesk.shared.core.transitions import TRANSITIONS


def test_every_transition_function_stays_inside_the_lifecycle_table() -> None:
    for name, (sources, targets) in TRANSITIONS.items():
        for source in sources:
            for target in targets:
                assert is_allowed(source, target), f"{name}: {source} -> {target} not allowed"


def test_final_states_have_no_way_out() -> None:
    for status in FINAL:
        assert ALLOWED_TRANSITIONS[status] == frozenset()


def test_every_state_is_in_the_table() -> None:
    assert set(ALLOWED_TRANSITIONS) == set(JobStatus)
