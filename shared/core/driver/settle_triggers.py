"""The settle triggers' SQL, per database (`jobdesk.shared.workflows.settle` says what they
do and installs them). Here because they write `jobdesk_jobs`: every statement that does
is the driver's."""

from __future__ import annotations

from jobdesk.shared.core.notifications import NOTIFY_CHANNEL
from jobdesk.shared.core.states import FINAL, JobStatus, sql_values

#: The channel a job's final outcome is announced on (payload: its id), for `wait()`.
SETTLED_CHANNEL = "jobdesk_settled"

_FINAL = ", ".join(f"'{status}'" for status in sql_values(FINAL))
_WAITING = JobStatus.WAITING.value
_QUEUED = JobStatus.QUEUED.value
_SUCCEEDED = JobStatus.SUCCEEDED.value

_POSTGRESQL_FUNCTION = f"""
CREATE OR REPLACE FUNCTION jobdesk_settle() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    batch_ids bigint[];
    batch_finished integer[];
    batch_succeeded integer[];
    dependent_ids bigint[];
    dependent_counts integer[];
    woken integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM settle_new WHERE batch_id IS NOT NULL OR watched) THEN
        RETURN NULL;
    END IF;

    -- Batch children that became final in this statement, per batch.
    SELECT array_agg(m.batch_id ORDER BY m.batch_id), array_agg(m.f ORDER BY m.batch_id),
           array_agg(m.s ORDER BY m.batch_id)
      INTO batch_ids, batch_finished, batch_succeeded
      FROM (SELECT n.batch_id, count(*) AS f,
                   count(*) FILTER (WHERE n.status = '{_SUCCEEDED}') AS s
              FROM settle_new n JOIN settle_old o ON o.id = n.id
             WHERE n.batch_id IS NOT NULL AND n.status IN ({_FINAL})
               AND o.status NOT IN ({_FINAL})
             GROUP BY n.batch_id) AS m;
    IF batch_ids IS NOT NULL THEN
        PERFORM 1 FROM jobdesk_batches WHERE id = ANY(batch_ids) ORDER BY id FOR UPDATE;
        UPDATE jobdesk_batches b
           SET finished = b.finished + m.f, succeeded = b.succeeded + m.s,
               finished_at = CASE WHEN b.finished + m.f >= b.total
                                  THEN statement_timestamp() ELSE b.finished_at END
          FROM unnest(batch_ids, batch_finished, batch_succeeded) AS m(id, f, s)
         WHERE b.id = m.id;
        WITH released AS (
            UPDATE jobdesk_jobs j
               SET status = '{_QUEUED}', updated_at = statement_timestamp(),
                   next_run_at = greatest(j.next_run_at, statement_timestamp())
              FROM jobdesk_batches b
             WHERE b.id = ANY(batch_ids) AND j.status = '{_WAITING}'
               AND ((j.id = b.on_finish_job_id AND b.finished >= b.total)
                    OR (j.id = b.on_success_job_id AND b.succeeded >= b.total))
            RETURNING j.queue
        )
        SELECT count(pg_notify('{NOTIFY_CHANNEL}', q)) INTO woken
          FROM (SELECT DISTINCT queue AS q FROM released) AS r;
    END IF;

    -- Jobs enqueued after= the ones that succeeded in this statement.
    SELECT array_agg(d.job_id ORDER BY d.job_id), array_agg(d.n ORDER BY d.job_id)
      INTO dependent_ids, dependent_counts
      FROM (SELECT dep.job_id, count(*) AS n
              FROM settle_new n JOIN settle_old o ON o.id = n.id
              JOIN jobdesk_job_dependencies dep ON dep.depends_on_id = n.id
             WHERE n.watched AND n.status = '{_SUCCEEDED}' AND o.status <> '{_SUCCEEDED}'
             GROUP BY dep.job_id) AS d;
    IF dependent_ids IS NOT NULL THEN
        PERFORM 1 FROM jobdesk_jobs WHERE id = ANY(dependent_ids) ORDER BY id FOR UPDATE;
        WITH released AS (
            UPDATE jobdesk_jobs j
               SET waiting_for = j.waiting_for - d.n, updated_at = statement_timestamp(),
                   status = CASE WHEN j.waiting_for - d.n <= 0 THEN '{_QUEUED}' ELSE j.status END,
                   next_run_at = CASE WHEN j.waiting_for - d.n <= 0
                                      THEN greatest(j.next_run_at, statement_timestamp())
                                      ELSE j.next_run_at END
              FROM unnest(dependent_ids, dependent_counts) AS d(id, n)
             WHERE j.id = d.id AND j.status = '{_WAITING}'
            RETURNING j.queue, j.status
        )
        SELECT count(pg_notify('{NOTIFY_CHANNEL}', q)) INTO woken
          FROM (SELECT DISTINCT queue AS q FROM released WHERE status = '{_QUEUED}') AS r;
    END IF;

    PERFORM pg_notify('{SETTLED_CHANNEL}', n.id::text)
       FROM settle_new n JOIN settle_old o ON o.id = n.id
      WHERE n.watched AND n.status IN ({_FINAL}) AND o.status NOT IN ({_FINAL});
    RETURN NULL;
END $$"""

#: The PostgreSQL function and trigger (the migration and `create_all` run them).
POSTGRESQL_DDL: tuple[str, ...] = (
    _POSTGRESQL_FUNCTION,
    "CREATE TRIGGER jobdesk_settle AFTER UPDATE ON jobdesk_jobs "
    "REFERENCING OLD TABLE AS settle_old NEW TABLE AS settle_new FOR EACH STATEMENT "
    "EXECUTE FUNCTION jobdesk_settle()",
)

_SQLITE_NOW = "(strftime('%Y-%m-%d %H:%M:%f', 'now') || '000')"

#: The SQLite triggers: one per reason a job's end matters.
SQLITE_DDL: tuple[str, ...] = (
    f"""CREATE TRIGGER jobdesk_settle_batch AFTER UPDATE OF status ON jobdesk_jobs
WHEN NEW.batch_id IS NOT NULL AND NEW.status IN ({_FINAL}) AND OLD.status NOT IN ({_FINAL})
BEGIN
    UPDATE jobdesk_batches
       SET finished = finished + 1, succeeded = succeeded + (NEW.status = '{_SUCCEEDED}'),
           finished_at = CASE WHEN finished + 1 >= total THEN {_SQLITE_NOW} ELSE finished_at END
     WHERE id = NEW.batch_id;
    UPDATE jobdesk_jobs
       SET status = '{_QUEUED}', updated_at = {_SQLITE_NOW},
           next_run_at = max(next_run_at, {_SQLITE_NOW})
     WHERE status = '{_WAITING}' AND id IN (
           SELECT on_finish_job_id FROM jobdesk_batches
            WHERE id = NEW.batch_id AND finished >= total
           UNION ALL
           SELECT on_success_job_id FROM jobdesk_batches
            WHERE id = NEW.batch_id AND succeeded >= total);
END""",
    f"""CREATE TRIGGER jobdesk_settle_dependents AFTER UPDATE OF status ON jobdesk_jobs
WHEN NEW.watched AND NEW.status = '{_SUCCEEDED}' AND OLD.status <> '{_SUCCEEDED}'
BEGIN
    UPDATE jobdesk_jobs
       SET waiting_for = waiting_for - 1, updated_at = {_SQLITE_NOW},
           status = CASE WHEN waiting_for <= 1 THEN '{_QUEUED}' ELSE status END,
           next_run_at = CASE WHEN waiting_for <= 1 THEN max(next_run_at, {_SQLITE_NOW})
                              ELSE next_run_at END
     WHERE status = '{_WAITING}' AND id IN (
           SELECT job_id FROM jobdesk_job_dependencies WHERE depends_on_id = NEW.id);
END""",
)
