"""The torture suite: real workers, a real database and real receivers under faults.

`python -m tests.chaos --profile ci|soak|sqlite --seed N` runs one chaos run (see
`driver`); `test_chaos.py` runs the SQLite profile inside pytest, and the PostgreSQL
CI profile when `JOBDESK_CHAOS=ci` is set (`.ci/run` runs it as its own step).
"""
