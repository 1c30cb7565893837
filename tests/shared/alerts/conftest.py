"""The real SMTP server and webhook receiver fixtures of the job-type tests, shared here
for the alert delivery story."""

from tests.worker.jobs.conftest import jobs_env, receiver, smtp

__all__ = ["jobs_env", "receiver", "smtp"]
