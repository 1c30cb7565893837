"""Jobdesk's domain, shared by the worker and the dashboard: the schema and every query.

- `core`: the queue itself — states, the core tables, enqueue, claim, transitions, the
  retry policy, the effects ledger, leadership and the worker registry. It imports no
  other subpackage.
- `operator`: what people read and decide — job lists and details, filters, stats,
  dead letters, triage, the audit trail and dashboard accounts.
- features on top of the core: `alerts`, `webhooks` (endpoints, signing, the SSRF guard,
  the delivery log), `limits` (rate limits and circuit breakers), `reports`, `retention`.
- `settings` (every `JOBDESK_*` variable), `schema` (all tables on one MetaData) and
  `migrate` (Alembic).

Apps need only `jobdesk.enqueue` / `jobdesk.enqueue_many`.
"""

if __name__ != "jobdesk.shared":  # `import shared` would load a second copy of each module
    raise ImportError(
        f"import jobdesk.shared, not {__name__}: Jobdesk's only import name is `jobdesk`"
    )
