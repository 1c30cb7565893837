"""The connection budget: a fleet that cannot fit in max_connections is refused at start."""

from __future__ import annotations

import pytest

from jobdesk.shared.core.capacity import ServerCapacity
from jobdesk.shared.settings import Settings
from jobdesk.worker.budget import BudgetError, budget_for, check_budget

SERVER = ServerCapacity(max_connections=100, reserved=3, in_use=10)


def test_per_process_budget_counts_pools_overflow_and_the_listener() -> None:
    budget = budget_for(total_slots=200, settings=Settings(db_pool_size=10), runtime_pool=5)
    assert (budget.runtime, budget.handlers, budget.listener) == (7, 15, 1)
    assert budget.per_process == 23


def test_a_fleet_that_cannot_fit_is_refused_with_the_formula() -> None:
    budget = budget_for(200, Settings(db_pool_size=10), 5)
    with pytest.raises(BudgetError) as caught:
        check_budget(budget, Settings(fleet_processes=5), SERVER)
    message = str(caught.value)
    assert "5 worker processes (JOBDESK_FLEET_PROCESSES) may open up to 115 connections" in message
    assert "server allows 97" in message


def test_a_fleet_that_fits_passes_and_a_crowded_server_warns() -> None:
    budget = budget_for(10, Settings(db_pool_size=10), 5)
    assert check_budget(budget, Settings(fleet_processes=4), SERVER) is None
    crowded = ServerCapacity(max_connections=100, reserved=3, in_use=90)
    warning = check_budget(budget, Settings(), crowded)
    assert warning is not None
    assert "90 of the server's 97 are in use" in warning


@pytest.mark.slow
@pytest.mark.postgresql_only
def test_the_worker_refuses_to_start_over_budget(db_url: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBDESK_")}
    env |= {"JOBDESK_DATABASE_URL": db_url, "JOBDESK_FLEET_PROCESSES": "100000"}
    done = subprocess.run(
        [
            str(Path(sys.executable).with_name("jobdesk")),
            "worker",
            "--jobs",
            "tests.worker.jobmods.basic",
        ],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "JOBDESK_FLEET_PROCESSES" in done.stderr
    assert "\n" not in done.stderr.strip()
