"""The job module the demo's worker loads (`JOBDESK_JOB_MODULES=worker.demo.jobs`):
importing it installs the demo app's resolvers, its nightly report and the shortened
demo retry schedule (see `worker.demo.hooks`)."""

from worker.demo.hooks import install

install()
