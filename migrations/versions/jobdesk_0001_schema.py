"""Jobdesk's schema: every `jobdesk_*` table.

Revision ID: jobdesk_0001
Revises:
Create Date: 2026-12-01 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import jobdesk.shared.core.driver.types
from jobdesk.shared.core import attempt_cleanup, job_counts, payload_terms

revision: str = "jobdesk_0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    if postgresql:
        # Trigram indexes make `ILIKE '%text%'` error search fast on PostgreSQL.
        op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    op.create_table(
        "jobdesk_alerts",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("rule", sa.String(length=100), nullable=False),
        sa.Column("subject", sa.String(length=200), nullable=False),
        sa.Column("status", sa.String(length=16), server_default="open", nullable=False),
        sa.Column(
            "opened_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            server_default=jobdesk.shared.core.driver.types.utcnow(),
            nullable=False,
        ),
        sa.Column(
            "last_seen_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            server_default=jobdesk.shared.core.driver.types.utcnow(),
            nullable=False,
        ),
        sa.Column(
            "resolved_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            nullable=True,
        ),
        sa.Column("count", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("details", jobdesk.shared.core.driver.types.JSONDocument, nullable=True),
        sa.Column("notify_key", sa.String(length=200), nullable=True),
        sa.Column("acknowledged_by", sa.String(length=100), nullable=True),
        sa.Column(
            "acknowledged_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            nullable=True,
        ),
        sa.Column("acknowledged_note", sa.Text(), nullable=True),
        sa.CheckConstraint("status IN ('open', 'resolved')", name=op.f("ck_jobdesk_alerts_status")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobdesk_alerts")),
        sa.UniqueConstraint("notify_key", name=op.f("uq_jobdesk_alerts_notify_key")),
    )
    with op.batch_alter_table("jobdesk_alerts", schema=None) as batch_op:
        batch_op.create_index("ix_jobdesk_alerts_opened_at", ["opened_at"], unique=False)
        batch_op.create_index(
            "uq_jobdesk_alerts_open_rule_subject",
            ["rule", "subject"],
            unique=True,
            postgresql_where=sa.text("status = 'open'"),
            sqlite_where=sa.text("status = 'open'"),
        )

    op.create_table(
        "jobdesk_audit_log",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column(
            "at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            server_default=jobdesk.shared.core.driver.types.utcnow(),
            nullable=False,
        ),
        sa.Column("actor", sa.String(length=100), nullable=False),
        sa.Column("action", sa.String(length=50), nullable=False),
        sa.Column("job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column(
            "new_job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True
        ),
        sa.Column("subject", sa.String(length=200), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("details", jobdesk.shared.core.driver.types.JSONDocument, nullable=True),
        sa.CheckConstraint(
            "action IN ('alert.acknowledge', 'breaker.close', 'breaker.open', 'cancel', 'endpoint.add', 'endpoint.disable', 'endpoint.pause', 'endpoint.resume', 'endpoint.rotate_secret', 'endpoint.set_url', 'fix_retry', 'ignore', 'operator.add', 'operator.disable', 'operator.enable', 'operator.password', 'operator.role', 'queue.pause', 'queue.resume', 'report.cancel', 'report.retry_chunk', 'retry', 'schedule.pause', 'schedule.resume', 'schedule.run')",
            name=op.f("ck_jobdesk_audit_log_action"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobdesk_audit_log")),
    )
    with op.batch_alter_table("jobdesk_audit_log", schema=None) as batch_op:
        batch_op.create_index("ix_jobdesk_audit_log_actor_at", ["actor", "at"], unique=False)
        batch_op.create_index("ix_jobdesk_audit_log_at", ["at"], unique=False)
        batch_op.create_index("ix_jobdesk_audit_log_job_id", ["job_id"], unique=False)

    op.create_table(
        "jobdesk_circuit_breakers",
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("state", sa.String(length=16), server_default="closed", nullable=False),
        sa.Column(
            "consecutive_failures", sa.Integer(), server_default=sa.text("0"), nullable=False
        ),
        sa.Column(
            "opened_at", jobdesk.shared.core.driver.types.UTCDateTime(timezone=True), nullable=True
        ),
        sa.Column(
            "retry_at", jobdesk.shared.core.driver.types.UTCDateTime(timezone=True), nullable=True
        ),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column(
            "updated_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            server_default=jobdesk.shared.core.driver.types.utcnow(),
            nullable=False,
        ),
        sa.CheckConstraint(
            "state IN ('closed', 'half_open', 'open')",
            name=op.f("ck_jobdesk_circuit_breakers_state"),
        ),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_jobdesk_circuit_breakers")),
    )
    op.create_table(
        "jobdesk_effects",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("key", sa.String(length=300), nullable=False),
        sa.Column("job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column(
            "created_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            server_default=jobdesk.shared.core.driver.types.utcnow(),
            nullable=False,
        ),
        sa.Column("detail", jobdesk.shared.core.driver.types.JSONDocument, nullable=True),
        sa.Column("state", sa.String(length=16), server_default="done", nullable=False),
        sa.Column("lease_token", sa.BigInteger(), nullable=True),
        sa.CheckConstraint("state IN ('done', 'reserved')", name=op.f("ck_jobdesk_effects_state")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobdesk_effects")),
        sa.UniqueConstraint("key", name=op.f("uq_jobdesk_effects_key")),
    )
    with op.batch_alter_table("jobdesk_effects", schema=None) as batch_op:
        batch_op.create_index("ix_jobdesk_effects_job_id", ["job_id"], unique=False)

    op.create_table(
        "jobdesk_jobs",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("job_type", sa.String(length=100), nullable=False),
        sa.Column("queue", sa.String(length=100), server_default="default", nullable=False),
        sa.Column(
            "payload",
            jobdesk.shared.core.driver.types.JSONDocument,
            server_default=sa.text("'{}'"),
            nullable=False,
        ),
        sa.Column("status", sa.String(length=16), server_default="queued", nullable=False),
        sa.Column("priority", sa.SmallInteger(), server_default=sa.text("5"), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("max_attempts", sa.Integer(), server_default=sa.text("5"), nullable=False),
        sa.Column(
            "next_run_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            server_default=jobdesk.shared.core.driver.types.utcnow(),
            nullable=False,
        ),
        sa.Column(
            "created_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            server_default=jobdesk.shared.core.driver.types.utcnow(),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            server_default=jobdesk.shared.core.driver.types.utcnow(),
            nullable=False,
        ),
        sa.Column(
            "started_at", jobdesk.shared.core.driver.types.UTCDateTime(timezone=True), nullable=True
        ),
        sa.Column(
            "finished_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            nullable=True,
        ),
        sa.Column(
            "locked_at", jobdesk.shared.core.driver.types.UTCDateTime(timezone=True), nullable=True
        ),
        sa.Column("locked_by", sa.String(length=100), nullable=True),
        sa.Column("lease_token", sa.BigInteger(), nullable=True),
        sa.Column(
            "lease_expires_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            nullable=True,
        ),
        sa.Column("timeout_seconds", sa.Float(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("error_fingerprint", sa.String(length=32), nullable=True),
        sa.Column("idempotency_key", sa.String(length=200), nullable=True),
        sa.Column("group_key", sa.String(length=200), nullable=True),
        sa.Column("progress", jobdesk.shared.core.driver.types.JSONDocument, nullable=True),
        sa.Column("result", jobdesk.shared.core.driver.types.JSONDocument, nullable=True),
        sa.Column(
            "retried_from_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True
        ),
        sa.Column("resolution", sa.String(length=16), nullable=True),
        sa.Column("resolved_by", sa.String(length=100), nullable=True),
        sa.Column(
            "resolved_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            nullable=True,
        ),
        sa.Column("resolution_reason", sa.Text(), nullable=True),
        sa.Column(
            "cancel_requested_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            nullable=True,
        ),
        sa.Column("cancelled_by", sa.String(length=100), nullable=True),
        sa.Column("cancel_reason", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "resolution IS NULL OR resolution IN ('requeued', 'fixed', 'ignored')",
            name=op.f("ck_jobdesk_jobs_resolution"),
        ),
        sa.CheckConstraint(
            "status IN ('queued', 'running', 'succeeded', 'failed', 'dead', 'cancelled')",
            name=op.f("ck_jobdesk_jobs_status"),
        ),
        sa.CheckConstraint(
            "attempts >= 0 AND attempts <= max_attempts", name=op.f("ck_jobdesk_jobs_attempts")
        ),
        sa.CheckConstraint(
            "length(job_type) BETWEEN 1 AND 100 AND length(queue) BETWEEN 1 AND 100",
            name=op.f("ck_jobdesk_jobs_names"),
        ),
        sa.CheckConstraint(
            "max_attempts BETWEEN 1 AND 100", name=op.f("ck_jobdesk_jobs_max_attempts")
        ),
        sa.CheckConstraint("priority BETWEEN 0 AND 9", name=op.f("ck_jobdesk_jobs_priority")),
        sa.CheckConstraint(
            "timeout_seconds IS NULL OR timeout_seconds > 0", name=op.f("ck_jobdesk_jobs_timeout")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobdesk_jobs")),
        sqlite_autoincrement=True,
    )
    with op.batch_alter_table("jobdesk_jobs", schema=None) as batch_op:
        batch_op.create_index(
            "ix_jobdesk_jobs_active_group",
            ["group_key", "priority", "id"],
            unique=False,
            postgresql_where=sa.text(
                "group_key IS NOT NULL AND status IN ('queued', 'running', 'failed')"
            ),
            sqlite_where=sa.text(
                "group_key IS NOT NULL AND status IN ('queued', 'running', 'failed')"
            ),
        )
        batch_op.create_index(
            "ix_jobdesk_jobs_claimable",
            ["queue", "priority", "next_run_at", "id"],
            unique=False,
            postgresql_where=sa.text("status IN ('failed', 'queued')"),
            sqlite_where=sa.text("status IN ('failed', 'queued')"),
        )
        batch_op.create_index(
            "ix_jobdesk_jobs_claimable_any_queue",
            ["priority", "next_run_at", "id"],
            unique=False,
            postgresql_where=sa.text("status IN ('failed', 'queued')"),
            sqlite_where=sa.text("status IN ('failed', 'queued')"),
        )
        batch_op.create_index(
            "ix_jobdesk_jobs_dead_fingerprint",
            ["status", "error_fingerprint"],
            unique=False,
            postgresql_where=sa.text("error_fingerprint IS NOT NULL"),
            sqlite_where=sa.text("error_fingerprint IS NOT NULL"),
        )
        batch_op.create_index(
            "ix_jobdesk_jobs_dead_unresolved",
            ["error_fingerprint", "job_type", "finished_at", "id"],
            unique=False,
            postgresql_where=sa.text("status = 'dead' AND resolution IS NULL"),
            sqlite_where=sa.text("status = 'dead' AND resolution IS NULL"),
        )
        batch_op.create_index(
            "ix_jobdesk_jobs_retried_from_id",
            ["retried_from_id"],
            unique=False,
            postgresql_where=sa.text("retried_from_id IS NOT NULL"),
            sqlite_where=sa.text("retried_from_id IS NOT NULL"),
        )
        batch_op.create_index(
            "ix_jobdesk_jobs_running_lease",
            ["lease_expires_at"],
            unique=False,
            postgresql_where=sa.text("status = 'running'"),
            sqlite_where=sa.text("status = 'running'"),
        )
        batch_op.create_index(
            "ix_jobdesk_jobs_status_finished_at",
            ["status", "finished_at"],
            unique=False,
            postgresql_where=sa.text("status <> 'running'"),
        )
        batch_op.create_index(
            "ix_jobdesk_jobs_status_queue_job_type",
            ["status", "queue", "job_type"],
            unique=False,
            postgresql_where=sa.text("status <> 'running'"),
        )
        batch_op.create_index(
            "uq_jobdesk_jobs_idempotency_key",
            ["idempotency_key"],
            unique=True,
            postgresql_where=sa.text("retried_from_id IS NULL AND idempotency_key IS NOT NULL"),
            sqlite_where=sa.text("retried_from_id IS NULL AND idempotency_key IS NOT NULL"),
        )
        batch_op.create_index(
            "uq_jobdesk_jobs_running_group_key",
            ["group_key"],
            unique=True,
            postgresql_where=sa.text("status = 'running' AND group_key IS NOT NULL"),
            sqlite_where=sa.text("status = 'running' AND group_key IS NOT NULL"),
        )

    _create_counting(postgresql)
    op.create_table(
        "jobdesk_leases",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("holder", sa.String(length=100), nullable=False),
        sa.Column(
            "acquired_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            server_default=jobdesk.shared.core.driver.types.utcnow(),
            nullable=False,
        ),
        sa.Column(
            "expires_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_jobdesk_leases")),
    )
    op.create_table(
        "jobdesk_cancel_requests",
        sa.Column(
            "job_id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=False,
            nullable=False,
        ),
        sa.Column(
            "requested_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            nullable=False,
        ),
        sa.Column("requested_by", sa.String(length=100), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_jobdesk_cancel_requests")),
    )
    op.create_table(
        "jobdesk_queue_pauses",
        sa.Column("queue", sa.String(length=100), nullable=False),
        sa.Column("paused_by", sa.String(length=100), nullable=False),
        sa.Column(
            "paused_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            server_default=jobdesk.shared.core.driver.types.utcnow(),
            nullable=False,
        ),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("queue", name=op.f("pk_jobdesk_queue_pauses")),
    )
    op.create_table(
        "jobdesk_operators",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("username", sa.String(length=100), nullable=False),
        sa.Column("password_hash", sa.String(length=255), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("disabled", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column(
            "created_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            server_default=jobdesk.shared.core.driver.types.utcnow(),
            nullable=False,
        ),
        sa.Column(
            "last_login_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            nullable=True,
        ),
        sa.Column("session_epoch", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("timezone", sa.String(length=64), nullable=True),
        sa.CheckConstraint(
            "role IN ('admin', 'operator', 'viewer')", name=op.f("ck_jobdesk_operators_role")
        ),
        sa.CheckConstraint("session_epoch >= 0", name=op.f("ck_jobdesk_operators_session_epoch")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobdesk_operators")),
        sa.UniqueConstraint("username", name=op.f("uq_jobdesk_operators_username")),
    )
    op.create_table(
        "jobdesk_rate_limits",
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("tokens", sa.Float(), nullable=False),
        sa.Column(
            "updated_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            server_default=jobdesk.shared.core.driver.types.utcnow(),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_jobdesk_rate_limits")),
    )
    op.create_table(
        "jobdesk_report_runs",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("report", sa.String(length=100), nullable=False),
        sa.Column("params", jobdesk.shared.core.driver.types.JSONDocument, nullable=True),
        sa.Column("requested_by", sa.String(length=100), nullable=True),
        sa.Column("status", sa.String(length=16), server_default="running", nullable=False),
        sa.Column("chunks_total", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("chunks_done", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("rows", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("file_path", sa.Text(), nullable=True),
        sa.Column("size_bytes", sa.BigInteger(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            server_default=jobdesk.shared.core.driver.types.utcnow(),
            nullable=False,
        ),
        sa.Column(
            "finished_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            nullable=True,
        ),
        sa.Column(
            "expires_at", jobdesk.shared.core.driver.types.UTCDateTime(timezone=True), nullable=True
        ),
        sa.CheckConstraint(
            "status IN ('assembling', 'cancelled', 'failed', 'running', 'succeeded')",
            name=op.f("ck_jobdesk_report_runs_status"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobdesk_report_runs")),
    )
    op.create_table(
        "jobdesk_webhook_endpoints",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("secret", sa.String(length=200), nullable=False),
        sa.Column("previous_secret", sa.String(length=200), nullable=True),
        sa.Column(
            "previous_secret_expires_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            nullable=True,
        ),
        sa.Column("paused", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column(
            "paused_until",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            nullable=True,
        ),
        sa.Column("paused_reason", sa.Text(), nullable=True),
        sa.Column("disabled_reason", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            server_default=jobdesk.shared.core.driver.types.utcnow(),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            server_default=jobdesk.shared.core.driver.types.utcnow(),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobdesk_webhook_endpoints")),
        sa.UniqueConstraint("name", name=op.f("uq_jobdesk_webhook_endpoints_name")),
    )
    op.create_table(
        "jobdesk_workers",
        sa.Column("id", sa.String(length=100), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("queues", jobdesk.shared.core.driver.types.JSONDocument, nullable=True),
        sa.Column("job_types", jobdesk.shared.core.driver.types.JSONDocument, nullable=True),
        sa.Column("concurrency", sa.Integer(), nullable=False),
        sa.Column("version", sa.String(length=50), nullable=False),
        sa.Column(
            "started_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            server_default=jobdesk.shared.core.driver.types.utcnow(),
            nullable=False,
        ),
        sa.Column(
            "last_seen_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            server_default=jobdesk.shared.core.driver.types.utcnow(),
            nullable=False,
        ),
        sa.Column("stopping", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("clock_skew_seconds", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobdesk_workers")),
    )
    with op.batch_alter_table("jobdesk_workers", schema=None) as batch_op:
        batch_op.create_index("ix_jobdesk_workers_last_seen_at", ["last_seen_at"], unique=False)

    op.create_table(
        "jobdesk_job_types",
        sa.Column("job_type", sa.String(length=100), nullable=False),
        sa.Column("queue", sa.String(length=100), nullable=False),
        sa.Column("priority", sa.SmallInteger(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("timeout_seconds", sa.Float(), nullable=True),
        sa.Column("published_by", sa.String(length=100), nullable=False),
        sa.Column(
            "published_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            server_default=jobdesk.shared.core.driver.types.utcnow(),
            nullable=False,
        ),
        sa.CheckConstraint(
            "max_attempts BETWEEN 1 AND 100", name=op.f("ck_jobdesk_job_types_max_attempts")
        ),
        sa.CheckConstraint("priority BETWEEN 0 AND 9", name=op.f("ck_jobdesk_job_types_priority")),
        sa.CheckConstraint(
            "timeout_seconds IS NULL OR timeout_seconds > 0",
            name=op.f("ck_jobdesk_job_types_timeout"),
        ),
        sa.PrimaryKeyConstraint("job_type", name=op.f("pk_jobdesk_job_types")),
    )
    op.create_table(
        "jobdesk_job_attempts",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("worker_id", sa.String(length=100), nullable=True),
        sa.Column(
            "started_at", jobdesk.shared.core.driver.types.UTCDateTime(timezone=True), nullable=True
        ),
        sa.Column(
            "finished_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            server_default=jobdesk.shared.core.driver.types.utcnow(),
            nullable=False,
        ),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("error_fingerprint", sa.String(length=32), nullable=True),
        sa.CheckConstraint(
            "outcome IN ('succeeded', 'failed', 'timeout', 'lost', 'permanent', 'released', "
            "'cancelled')",
            name=op.f("ck_jobdesk_job_attempts_outcome"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobdesk_job_attempts")),
    )
    with op.batch_alter_table("jobdesk_job_attempts", schema=None) as batch_op:
        batch_op.create_index(
            "ix_jobdesk_job_attempts_error_fingerprint",
            ["error_fingerprint"],
            unique=False,
            postgresql_where=sa.text("error_fingerprint IS NOT NULL"),
            sqlite_where=sa.text("error_fingerprint IS NOT NULL"),
        )
        batch_op.create_index(
            "ix_jobdesk_job_attempts_job_id_attempt", ["job_id", "attempt"], unique=False
        )
        batch_op.create_index("ix_jobdesk_job_attempts_finished_at", ["finished_at"], unique=False)
    # Deleting a job deletes its attempts (see jobdesk.shared.core.attempt_cleanup).
    for statement in attempt_cleanup.ddl(op.get_bind()):
        op.execute(statement)

    op.create_table(
        "jobdesk_report_chunk_results",
        sa.Column("run_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("chunk_index", sa.Integer(), nullable=False),
        sa.Column("rows", sa.Integer(), nullable=False),
        sa.Column("data", jobdesk.shared.core.driver.types.JSONDocument, nullable=False),
        sa.Column(
            "created_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            server_default=jobdesk.shared.core.driver.types.utcnow(),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["jobdesk_report_runs.id"],
            name=op.f("fk_jobdesk_report_chunk_results_run_id_jobdesk_report_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "run_id", "chunk_index", name=op.f("pk_jobdesk_report_chunk_results")
        ),
    )
    op.create_table(
        "jobdesk_webhook_deliveries",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("endpoint", sa.String(length=100), nullable=False),
        sa.Column("webhook_id", sa.String(length=200), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column(
            "at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            server_default=jobdesk.shared.core.driver.types.utcnow(),
            nullable=False,
        ),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("latency_ms", sa.Float(), nullable=True),
        sa.Column("outcome", sa.String(length=32), nullable=False),
        sa.Column("response_excerpt", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobdesk_jobs.id"],
            name=op.f("fk_jobdesk_webhook_deliveries_job_id_jobdesk_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobdesk_webhook_deliveries")),
    )
    with op.batch_alter_table("jobdesk_webhook_deliveries", schema=None) as batch_op:
        batch_op.create_index(
            "ix_jobdesk_webhook_deliveries_endpoint_at", ["endpoint", "at"], unique=False
        )
        batch_op.create_index("ix_jobdesk_webhook_deliveries_job_id", ["job_id"], unique=False)
    op.create_table(
        "jobdesk_schedules",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("job_type", sa.String(length=100), nullable=False),
        sa.Column(
            "payload",
            jobdesk.shared.core.driver.types.JSONDocument,
            server_default=sa.text("'{}'"),
            nullable=False,
        ),
        sa.Column("cron", sa.String(length=100), nullable=True),
        sa.Column("every_seconds", sa.Float(), nullable=True),
        sa.Column("timezone", sa.String(length=64), server_default="UTC", nullable=False),
        sa.Column("catch_up", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column(
            "next_run_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            nullable=False,
        ),
        sa.Column(
            "last_slot_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            nullable=True,
        ),
        sa.Column(
            "last_job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True
        ),
        sa.Column("paused", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("paused_by", sa.String(length=100), nullable=True),
        sa.Column(
            "paused_at", jobdesk.shared.core.driver.types.UTCDateTime(timezone=True), nullable=True
        ),
        sa.Column("paused_reason", sa.Text(), nullable=True),
        sa.Column(
            "declared_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            server_default=jobdesk.shared.core.driver.types.utcnow(),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            server_default=jobdesk.shared.core.driver.types.utcnow(),
            nullable=False,
        ),
        sa.CheckConstraint(
            "(cron IS NULL) <> (every_seconds IS NULL)",
            name=op.f("ck_jobdesk_schedules_one_expression"),
        ),
        sa.CheckConstraint(
            "every_seconds IS NULL OR every_seconds > 0", name=op.f("ck_jobdesk_schedules_every")
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_jobdesk_schedules")),
    )
    with op.batch_alter_table("jobdesk_schedules", schema=None) as batch_op:
        batch_op.create_index("ix_jobdesk_schedules_next_run_at", ["next_run_at"], unique=False)
    op.create_table(
        "jobdesk_job_tombstones",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=False,
            nullable=False,
        ),
        sa.Column("job_type", sa.String(length=100), nullable=False),
        sa.Column("queue", sa.String(length=100), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=200), nullable=True),
        sa.Column(
            "created_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            nullable=False,
        ),
        sa.Column(
            "finished_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            nullable=True,
        ),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column(
            "retried_from_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True
        ),
        sa.Column("resolution", sa.String(length=16), nullable=True),
        sa.Column("resolved_by", sa.String(length=100), nullable=True),
        sa.Column(
            "resolved_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            nullable=True,
        ),
        sa.Column("resolution_reason", sa.Text(), nullable=True),
        sa.Column(
            "pruned_at", jobdesk.shared.core.driver.types.UTCDateTime(timezone=True), nullable=False
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobdesk_job_tombstones")),
    )
    with op.batch_alter_table("jobdesk_job_tombstones", schema=None) as batch_op:
        batch_op.create_index(
            "ix_jobdesk_job_tombstones_retried_from_id", ["retried_from_id"], unique=False
        )
        batch_op.create_index("ix_jobdesk_job_tombstones_pruned_at", ["pruned_at"], unique=False)
    op.create_table(
        "jobdesk_history_minutes",
        sa.Column(
            "minute", jobdesk.shared.core.driver.types.UTCDateTime(timezone=True), nullable=False
        ),
        sa.Column("queue", sa.String(length=100), nullable=False),
        sa.Column("job_type", sa.String(length=100), nullable=False),
        sa.Column("processed", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("failed", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("dead", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("waited", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("wait_seconds_sum", sa.Float(), server_default=sa.text("0"), nullable=False),
        sa.Column("wait_seconds_max", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint(
            "minute", "queue", "job_type", name=op.f("pk_jobdesk_history_minutes")
        ),
    )
    op.create_table(
        "jobdesk_history_hours",
        sa.Column(
            "hour", jobdesk.shared.core.driver.types.UTCDateTime(timezone=True), nullable=False
        ),
        sa.Column("queue", sa.String(length=100), nullable=False),
        sa.Column("job_type", sa.String(length=100), nullable=False),
        sa.Column("processed", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("failed", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("dead", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("waited", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("wait_seconds_sum", sa.Float(), server_default=sa.text("0"), nullable=False),
        sa.Column("wait_seconds_max", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("hour", "queue", "job_type", name=op.f("pk_jobdesk_history_hours")),
    )
    op.create_table(
        "jobdesk_history_watermark",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column(
            "last_attempt_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column(
            "settled_before",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            nullable=True,
        ),
        sa.Column(
            "rolled_at", jobdesk.shared.core.driver.types.UTCDateTime(timezone=True), nullable=True
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_jobdesk_history_watermark")),
    )
    if postgresql:
        op.create_index(
            "ix_jobdesk_jobs_last_error_trgm",
            "jobdesk_jobs",
            ["last_error"],
            postgresql_using="gin",
            postgresql_ops={"last_error": "gin_trgm_ops"},
            postgresql_where=sa.text("last_error IS NOT NULL"),
        )
        op.create_index(
            "ix_jobdesk_job_attempts_error_trgm",
            "jobdesk_job_attempts",
            ["error"],
            postgresql_using="gin",
            postgresql_ops={"error": "gin_trgm_ops"},
            postgresql_where=sa.text("error IS NOT NULL"),
        )
    _create_payload_search(postgresql)


def _create_payload_search(postgresql: bool) -> None:
    """Payload search's index: GIN over the JSONB on PostgreSQL; on SQLite the terms
    table kept by triggers (see jobdesk.shared.core.payload_terms)."""
    if postgresql:
        op.create_index(
            "ix_jobdesk_jobs_payload",
            "jobdesk_jobs",
            ["payload"],
            postgresql_using="gin",
            postgresql_ops={"payload": "jsonb_path_ops"},
        )
    op.create_table(
        "jobdesk_payload_terms",
        sa.Column("path", sa.String(length=200), nullable=False),
        sa.Column("value", sa.String(length=201), nullable=False),
        sa.Column("job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.PrimaryKeyConstraint("path", "value", "job_id", name=op.f("pk_jobdesk_payload_terms")),
        sqlite_with_rowid=False,
    )
    op.create_index(
        "ix_jobdesk_payload_terms_job_id", "jobdesk_payload_terms", ["job_id"], unique=False
    )
    if not postgresql:
        for statement in payload_terms.SQLITE_DDL:
            op.execute(statement)


def _drop_payload_search() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.drop_index("ix_jobdesk_jobs_payload", table_name="jobdesk_jobs")
    else:
        for name in payload_terms.TRIGGER_NAMES:
            op.execute(f"DROP TRIGGER IF EXISTS jobdesk_payload_terms_{name}")
    op.drop_index("ix_jobdesk_payload_terms_job_id", table_name="jobdesk_payload_terms")
    op.drop_table("jobdesk_payload_terms")


def _create_counting(postgresql: bool) -> None:
    """What the operator's counts read instead of every job: the counts table (kept by
    triggers on PostgreSQL) and, on PostgreSQL, small partial indexes probed once per
    dead-letter group / queue / held endpoint."""
    if postgresql:
        op.create_index(
            "ix_jobdesk_jobs_dead_unresolved_newest",
            "jobdesk_jobs",
            ["error_fingerprint", "job_type", "id"],
            unique=False,
            postgresql_where=sa.text("status = 'dead' AND resolution IS NULL"),
        )
        op.create_index(
            "ix_jobdesk_jobs_queued_since",
            "jobdesk_jobs",
            ["queue", "next_run_at"],
            unique=False,
            postgresql_where=sa.text("status = 'queued'"),
        )
        op.create_index(
            "ix_jobdesk_jobs_waiting_endpoint",
            "jobdesk_jobs",
            [sa.text("(payload ->> 'endpoint')"), "id"],
            unique=False,
            postgresql_where=sa.text(
                "job_type = 'webhook.deliver' AND status IN ('failed', 'queued')"
            ),
        )
    op.create_table(
        "jobdesk_job_counts",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            sa.Identity(always=True),
            nullable=False,
        ),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("queue", sa.String(length=100), nullable=False),
        sa.Column("job_type", sa.String(length=100), nullable=False),
        sa.Column("resolved", sa.Boolean(), nullable=False),
        sa.Column("error_fingerprint", sa.String(length=32), nullable=True),
        sa.Column("n", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobdesk_job_counts")),
    )
    if postgresql:
        # Statement-level triggers keep jobdesk_job_counts (see jobdesk.shared.core.job_counts).
        for statement in job_counts.POSTGRESQL_DDL:
            op.execute(statement)


def _drop_counting() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for name in ("inserted", "updated", "deleted", "truncated"):
            op.execute(f"DROP TRIGGER IF EXISTS jobdesk_job_counts_{name} ON jobdesk_jobs")
            op.execute(f"DROP FUNCTION IF EXISTS jobdesk_job_counts_{name}()")
    op.drop_table("jobdesk_job_counts")
    if op.get_bind().dialect.name == "postgresql":
        op.drop_index("ix_jobdesk_jobs_waiting_endpoint", table_name="jobdesk_jobs")
        op.drop_index("ix_jobdesk_jobs_queued_since", table_name="jobdesk_jobs")
        op.drop_index("ix_jobdesk_jobs_dead_unresolved_newest", table_name="jobdesk_jobs")


def downgrade() -> None:
    _drop_payload_search()
    op.drop_table("jobdesk_history_watermark")
    op.drop_table("jobdesk_history_hours")
    op.drop_table("jobdesk_history_minutes")
    op.drop_table("jobdesk_job_tombstones")
    with op.batch_alter_table("jobdesk_schedules", schema=None) as batch_op:
        batch_op.drop_index("ix_jobdesk_schedules_next_run_at")
    op.drop_table("jobdesk_schedules")
    if op.get_bind().dialect.name == "postgresql":
        op.drop_index("ix_jobdesk_job_attempts_error_trgm", table_name="jobdesk_job_attempts")
        op.drop_index("ix_jobdesk_jobs_last_error_trgm", table_name="jobdesk_jobs")
    with op.batch_alter_table("jobdesk_webhook_deliveries", schema=None) as batch_op:
        batch_op.drop_index("ix_jobdesk_webhook_deliveries_job_id")
        batch_op.drop_index("ix_jobdesk_webhook_deliveries_endpoint_at")

    op.drop_table("jobdesk_webhook_deliveries")
    op.drop_table("jobdesk_report_chunk_results")
    for statement in attempt_cleanup.drop_ddl(op.get_bind()):
        op.execute(statement)
    with op.batch_alter_table("jobdesk_job_attempts", schema=None) as batch_op:
        batch_op.drop_index("ix_jobdesk_job_attempts_finished_at")
        batch_op.drop_index("ix_jobdesk_job_attempts_job_id_attempt")
        batch_op.drop_index("ix_jobdesk_job_attempts_error_fingerprint")

    op.drop_table("jobdesk_job_attempts")
    with op.batch_alter_table("jobdesk_workers", schema=None) as batch_op:
        batch_op.drop_index("ix_jobdesk_workers_last_seen_at")

    op.drop_table("jobdesk_workers")
    op.drop_table("jobdesk_job_types")
    op.drop_table("jobdesk_webhook_endpoints")
    op.drop_table("jobdesk_report_runs")
    op.drop_table("jobdesk_rate_limits")
    op.drop_table("jobdesk_operators")
    op.drop_table("jobdesk_queue_pauses")
    op.drop_table("jobdesk_cancel_requests")
    op.drop_table("jobdesk_leases")
    _drop_counting()
    with op.batch_alter_table("jobdesk_jobs", schema=None) as batch_op:
        batch_op.drop_index(
            "uq_jobdesk_jobs_running_group_key",
            postgresql_where=sa.text("status = 'running' AND group_key IS NOT NULL"),
            sqlite_where=sa.text("status = 'running' AND group_key IS NOT NULL"),
        )
        batch_op.drop_index(
            "uq_jobdesk_jobs_idempotency_key",
            postgresql_where=sa.text("retried_from_id IS NULL AND idempotency_key IS NOT NULL"),
            sqlite_where=sa.text("retried_from_id IS NULL AND idempotency_key IS NOT NULL"),
        )
        batch_op.drop_index("ix_jobdesk_jobs_status_queue_job_type")
        batch_op.drop_index("ix_jobdesk_jobs_status_finished_at")
        batch_op.drop_index(
            "ix_jobdesk_jobs_running_lease",
            postgresql_where=sa.text("status = 'running'"),
            sqlite_where=sa.text("status = 'running'"),
        )
        batch_op.drop_index("ix_jobdesk_jobs_retried_from_id")
        batch_op.drop_index(
            "ix_jobdesk_jobs_dead_unresolved",
            postgresql_where=sa.text("status = 'dead' AND resolution IS NULL"),
            sqlite_where=sa.text("status = 'dead' AND resolution IS NULL"),
        )
        batch_op.drop_index("ix_jobdesk_jobs_dead_fingerprint")
        batch_op.drop_index(
            "ix_jobdesk_jobs_claimable_any_queue",
            postgresql_where=sa.text("status IN ('failed', 'queued')"),
            sqlite_where=sa.text("status IN ('failed', 'queued')"),
        )
        batch_op.drop_index(
            "ix_jobdesk_jobs_claimable",
            postgresql_where=sa.text("status IN ('failed', 'queued')"),
            sqlite_where=sa.text("status IN ('failed', 'queued')"),
        )
        batch_op.drop_index(
            "ix_jobdesk_jobs_active_group",
            postgresql_where=sa.text(
                "group_key IS NOT NULL AND status IN ('queued', 'running', 'failed')"
            ),
            sqlite_where=sa.text(
                "group_key IS NOT NULL AND status IN ('queued', 'running', 'failed')"
            ),
        )

    op.drop_table("jobdesk_jobs")
    with op.batch_alter_table("jobdesk_effects", schema=None) as batch_op:
        batch_op.drop_index("ix_jobdesk_effects_job_id")

    op.drop_table("jobdesk_effects")
    op.drop_table("jobdesk_circuit_breakers")
    with op.batch_alter_table("jobdesk_audit_log", schema=None) as batch_op:
        batch_op.drop_index("ix_jobdesk_audit_log_job_id")
        batch_op.drop_index("ix_jobdesk_audit_log_at")
        batch_op.drop_index("ix_jobdesk_audit_log_actor_at")

    op.drop_table("jobdesk_audit_log")
    with op.batch_alter_table("jobdesk_alerts", schema=None) as batch_op:
        batch_op.drop_index(
            "uq_jobdesk_alerts_open_rule_subject",
            postgresql_where=sa.text("status = 'open'"),
            sqlite_where=sa.text("status = 'open'"),
        )
        batch_op.drop_index("ix_jobdesk_alerts_opened_at")

    op.drop_table("jobdesk_alerts")
