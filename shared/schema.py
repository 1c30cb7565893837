"""The whole schema: every table of every subpackage on one `MetaData`.

Each subpackage declares its own tables on the core's `Base`; importing them all here
gives Alembic and the schema tests the complete picture.
"""

from __future__ import annotations

from jobdesk.shared.alerts import models as _alerts
from jobdesk.shared.core import attempt_cleanup as _attempt_cleanup
from jobdesk.shared.core import audit as _audit
from jobdesk.shared.core import job_counts as _job_counts
from jobdesk.shared.core import job_keys as _job_keys
from jobdesk.shared.core import payload_terms as _payload_terms
from jobdesk.shared.core.models import metadata
from jobdesk.shared.flow import concurrency as _concurrency
from jobdesk.shared.flow import holds as _holds
from jobdesk.shared.flow import models as _flow
from jobdesk.shared.history import models as _history
from jobdesk.shared.limits import models as _limits
from jobdesk.shared.operator import models as _operator
from jobdesk.shared.redrives import models as _redrives
from jobdesk.shared.reports import models as _reports
from jobdesk.shared.retention import models as _retention
from jobdesk.shared.schedules import models as _schedules
from jobdesk.shared.secrets import models as _secrets
from jobdesk.shared.tracing import models as _tracing
from jobdesk.shared.webhooks import models as _webhooks
from jobdesk.shared.workflows import models as _workflows
from jobdesk.shared.workflows import settle as _settle

__all__ = ["metadata"]

# Imported for their side effect: each module registers its tables (or, like
# `attempt_cleanup`, its triggers) on `metadata`.
_TABLE_MODULES = (
    _alerts,
    _attempt_cleanup,
    _audit,
    _concurrency,
    _flow,
    _holds,
    _history,
    _job_counts,
    _job_keys,
    _limits,
    _operator,
    _payload_terms,
    _redrives,
    _reports,
    _retention,
    _schedules,
    _secrets,
    _settle,
    _tracing,
    _webhooks,
    _workflows,
)
