"""`jobdesk demo`: the sign-up story from the requirements, played end to end on one
machine with nothing to install.

- `story` — the demo *app*: its own `demo_users` / `demo_activity` tables and the
  sign-up that writes a user and its three pieces of follow-up work in one transaction;
- `hooks` — what the demo's worker installs (recipient and data resolvers, the nightly
  sign-up report, the shortened demo backoff); `jobs` is the job module that does it;
- `sinks` — a local SMTP sink and the demo console (inbox page + the "CRM" webhook
  receiver, down until someone brings it back);
- `narrator` — follows the story in the database and prints its milestones;
- `orchestrator` — starts and stops everything (`jobdesk demo`).
"""
