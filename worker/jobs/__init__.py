"""The built-in job types: `email.send`, `webhook.deliver`, `report.generate` and
`report.chunk`. Importing this package registers them with the worker registry.

The app-facing hooks live here too: `set_recipient_resolver` (turn `to_user_id` into an
address), `set_data_resolver` (build a webhook's data from `data_ref`) and
`set_mail_provider` (replace SMTP by another provider).
"""

from jobdesk.shared.reports.definitions import ReportDefinition, register_report
from jobdesk.worker.jobs import email, report, webhook
from jobdesk.worker.jobs.email import set_mail_provider
from jobdesk.worker.jobs.hooks import Recipient, set_data_resolver, set_recipient_resolver

__all__ = [
    "Recipient",
    "ReportDefinition",
    "email",
    "register_report",
    "report",
    "set_data_resolver",
    "set_mail_provider",
    "set_recipient_resolver",
    "webhook",
]
