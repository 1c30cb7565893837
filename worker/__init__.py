"""The Jobdesk worker process: runs jobs registered with `@job` under leases, timeouts and
retries, plus the leader's maintenance. Job authors import from `jobdesk`."""

if __name__ != "jobdesk.worker":  # `import worker` would load a second copy of each module
    raise ImportError(
        f"import jobdesk.worker, not {__name__}: Jobdesk's only import name is `jobdesk`"
    )
