"""The reaper waits for heartbeats to get through after it lost the database."""

from jobdesk.worker.maintenance.reaper import ContactGuard

REAPER_INTERVAL, HEARTBEAT = 1.0, 2.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_first_pass_waits_one_and_a_half_heartbeats_after_contact() -> None:
    clock = FakeClock()
    guard = ContactGuard(REAPER_INTERVAL, HEARTBEAT, clock)
    assert guard.holding()
    guard.contact()
    clock.now += 2.9
    assert guard.holding()
    clock.now += 0.2
    assert not guard.holding()
    guard.succeeded()
    clock.now += 1.0
    assert not guard.holding(), "regular passes are not held back"


def test_a_gap_in_passes_holds_back_again_and_a_failure_resets_the_wait() -> None:
    clock = FakeClock()
    guard = ContactGuard(REAPER_INTERVAL, HEARTBEAT, clock)
    guard.contact()
    clock.now += 3.0
    guard.succeeded()
    clock.now += 10.0  # the database (or this process) was away for a while
    assert guard.holding()
    guard.contact()
    clock.now += 1.0
    guard.failed()  # contact lost again mid-wait
    clock.now += 5.0
    assert guard.holding()
    guard.contact()
    clock.now += 3.0
    assert not guard.holding()
