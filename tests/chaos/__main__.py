"""`python -m tests.chaos --profile NAME --seed N [--keep]`: one chaos run (NAME: ci,
pgbouncer, partition, dbfaults, soak or sqlite).

Exit status 0 when the checker found nothing wrong and every planned fault happened,
1 otherwise (the figures and each failure are printed either way). The partition
profile needs root, `ip`, `nft` and libfaketime: without them it fails under CI=true
and is skipped with the reason printed elsewhere.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import traceback

from tests.chaos.driver import run_profile
from tests.chaos.netlab import unavailable_reason
from tests.chaos.partitions import libfaketime
from tests.chaos.profiles import PROFILES, Profile


def partition_unavailable(profile: Profile) -> str | None:
    """Why the profile's network-namespace hosts cannot run here (None: they can)."""
    reason = unavailable_reason()
    if reason is None and profile.skewed_hosts and libfaketime() is None:
        reason = "libfaketime missing (Debian package faketime)"
    return reason


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
    profile = PROFILES[args.profile]
    if profile.hosts:
        reason = partition_unavailable(profile)
        if reason and os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            print(f"chaos {profile.name}: cannot run here: {reason}", flush=True)
            return 1  # CI has root and installs the tools: missing ones are a failure
        if reason:
            print(f"chaos {profile.name}: skipped: {reason}", flush=True)
            return 0
    seeds = args.seed or [random.randrange(1, 1_000_000)]
    failed = []
    for seed in seeds:
        try:
            passed = run_profile(profile, seed, keep=args.keep)
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
