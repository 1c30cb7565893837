"""Workflows: batches of jobs with callbacks, jobs that run `after=` others, and how the
database moves the jobs that wait for them (`settle`).

A batch (`enqueue_batch`) is a row in `jobdesk_batches` and children carrying its id;
its callbacks are enqueued with it as `waiting` jobs. A dependent job is `waiting` with
`waiting_for` counting its dependencies that have not succeeded
(`jobdesk_job_dependencies`). The database's settle triggers move both to `queued` in
the transaction of the outcome that completes them, so every writer — a worker's
completion, the reaper, an operator's cancel — settles them, exactly once.
"""
