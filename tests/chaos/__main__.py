"""`python -m tests.chaos --profile ci|pgbouncer|soak|sqlite --seed N [--keep]`: one chaos run.

Exit status 0 when the checker found nothing wrong and every planned fault happened,
1 otherwise (the figures and each failure are printed either way).
"""

from __future__ import annotations

import argparse
import random
import sys
import traceback

from tests.chaos.driver import run_profile
from tests.chaos.profiles import PROFILES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="ci")
    parser.add_argument(
        "--seed",
        type=int,
        action="append",
        help="seed of the job mix and fault schedule; "
        "repeat to run several seeds in turn (default: one random seed)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work dir (worker logs)")
    args = parser.parse_args(argv)
    seeds = args.seed or [random.randrange(1, 1_000_000)]
    failed = []
    for seed in seeds:
        try:
            passed = run_profile(PROFILES[args.profile], seed, keep=args.keep)
        except Exception:  # a driver crash fails this seed; the others still run
            traceback.print_exc()
            passed = False
        if not passed:
            failed.append(seed)
    if len(seeds) > 1:
        print(f"{len(seeds) - len(failed)}/{len(seeds)} seeds passed; failed: {failed or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
