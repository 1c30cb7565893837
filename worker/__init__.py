"""The Jobdesk worker process: runs jobs registered with `@job` under leases, timeouts and
retries, plus the leader's maintenance. Job authors import from `jobdesk`."""
