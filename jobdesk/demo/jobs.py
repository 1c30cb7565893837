"""The job module the demo's worker loads (`JOBDESK_JOB_MODULES=jobdesk.demo.jobs`):
importing it installs the demo app's resolvers, its nightly report and the shortened
demo retry schedule (see `jobdesk.demo.hooks`)."""

from jobdesk.demo.hooks import install

install()
