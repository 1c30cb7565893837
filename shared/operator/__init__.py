"""The operator side: what support staff and on-call read and decide in the dashboard
and the CLI (job lists, details, stats, dead letters, triage, audit, accounts)."""
