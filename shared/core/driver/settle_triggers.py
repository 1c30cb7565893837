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

# The transition tables carry no statistics: the planner takes them for a row or two and
# joins them in a nested loop, which for a completion of 1,000 jobs compared a million
# pairs (60 ms). So the old and new rows are joined once, by hash (the function turns
# nested loops off for itself), and only after a scan that lets through the statements
# that ended a batch child or a watched job — a claim, a heartbeat or a plain job's
# completion stops at that scan.
_POSTGRESQL_FUNCTION = f"""
CREATE OR REPLACE FUNCTION jobdesk_settle() RETURNS trigger LANGUAGE plpgsql
SET enable_nestloop = off AS $$
DECLARE
    ended_ids bigint[];
    ended_batches bigint[];
    ended_ok boolean[];
    ended_watched boolean[];
    batch_ids bigint[];
    batch_finished integer[];
    batch_succeeded integer[];
    dependent_ids bigint[];
    dependent_counts integer[];
    callback_ids bigint[];
    woken integer;
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM settle_new
         WHERE (batch_id IS NOT NULL OR watched) AND status IN ({_FINAL})
    ) THEN
        RETURN NULL;
    END IF;

    -- The batch children and watched jobs this statement ended (not already final).
    SELECT array_agg(n.id), array_agg(n.batch_id), array_agg(n.status = '{_SUCCEEDED}'),
           array_agg(n.watched)
      INTO ended_ids, ended_batches, ended_ok, ended_watched
      FROM settle_new n JOIN settle_old o ON o.id = n.id
     WHERE (n.batch_id IS NOT NULL OR n.watched) AND n.status IN ({_FINAL})
       AND o.status NOT IN ({_FINAL});
    IF ended_ids IS NULL THEN
        RETURN NULL;
    END IF;

    -- Per batch: how many children ended, how many of them succeeded.
    SELECT array_agg(m.b ORDER BY m.b), array_agg(m.f ORDER BY m.b), array_agg(m.s ORDER BY m.b)
      INTO batch_ids, batch_finished, batch_succeeded
      FROM (SELECT e.b, count(*) AS f, count(*) FILTER (WHERE e.ok) AS s
              FROM unnest(ended_batches, ended_ok) AS e(b, ok)
             WHERE e.b IS NOT NULL
             GROUP BY e.b) AS m;
    IF batch_ids IS NOT NULL THEN
        PERFORM 1 FROM jobdesk_batches WHERE id = ANY(batch_ids) ORDER BY id FOR UPDATE;
        -- The callbacks of the batches this statement completed, looked up by id.
        WITH counted AS (
            UPDATE jobdesk_batches b
               SET finished = b.finished + m.f, succeeded = b.succeeded + m.s,
                   finished_at = CASE WHEN b.finished + m.f >= b.total
                                      THEN statement_timestamp() ELSE b.finished_at END
              FROM unnest(batch_ids, batch_finished, batch_succeeded) AS m(id, f, s)
             WHERE b.id = m.id
            RETURNING b.finished >= b.total AS all_final, b.succeeded >= b.total AS all_ok,
                      b.on_finish_job_id, b.on_success_job_id
        )
        SELECT array_agg(c.id) INTO callback_ids
          FROM (SELECT on_finish_job_id AS id FROM counted WHERE all_final
                UNION ALL
                SELECT on_success_job_id FROM counted WHERE all_ok) AS c
         WHERE c.id IS NOT NULL;
        IF callback_ids IS NOT NULL THEN
            WITH released AS (
                UPDATE jobdesk_jobs j
                   SET status = '{_QUEUED}', updated_at = statement_timestamp(),
                       next_run_at = greatest(j.next_run_at, statement_timestamp())
                 WHERE j.id = ANY(callback_ids) AND j.status = '{_WAITING}'
                RETURNING j.queue
            )
            SELECT count(pg_notify('{NOTIFY_CHANNEL}', q)) INTO woken
              FROM (SELECT DISTINCT queue AS q FROM released) AS r;
        END IF;
    END IF;

    -- Jobs enqueued after= the watched ones that succeeded.
    SELECT array_agg(d.job_id ORDER BY d.job_id), array_agg(d.n ORDER BY d.job_id)
      INTO dependent_ids, dependent_counts
      FROM (SELECT dep.job_id, count(*) AS n
              FROM unnest(ended_ids, ended_ok, ended_watched) AS e(id, ok, w)
              JOIN jobdesk_job_dependencies dep ON dep.depends_on_id = e.id
             WHERE e.w AND e.ok
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

    -- `wait()`ers of the watched ones.
    PERFORM pg_notify('{SETTLED_CHANNEL}', e.id::text)
       FROM unnest(ended_ids, ended_watched) AS e(id, w)
      WHERE e.w;
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
    # Per child that ends: its batch's counters (the one statement every child pays)...
    f"""CREATE TRIGGER jobdesk_settle_batch AFTER UPDATE OF status ON jobdesk_jobs
WHEN NEW.batch_id IS NOT NULL AND NEW.status IN ({_FINAL}) AND OLD.status NOT IN ({_FINAL})
BEGIN
    UPDATE jobdesk_batches
       SET finished = finished + 1, succeeded = succeeded + (NEW.status = '{_SUCCEEDED}'),
           finished_at = CASE WHEN finished + 1 >= total THEN {_SQLITE_NOW} ELSE finished_at END
     WHERE id = NEW.batch_id;
END""",
    # ... and the callbacks, only by the counter update that completes the batch.
    f"""CREATE TRIGGER jobdesk_settle_callbacks AFTER UPDATE OF finished ON jobdesk_batches
WHEN NEW.finished >= NEW.total AND OLD.finished < NEW.finished
BEGIN
    UPDATE jobdesk_jobs
       SET status = '{_QUEUED}', updated_at = {_SQLITE_NOW},
           next_run_at = max(next_run_at, {_SQLITE_NOW})
     WHERE status = '{_WAITING}' AND id IN (
           NEW.on_finish_job_id,
           CASE WHEN NEW.succeeded >= NEW.total THEN NEW.on_success_job_id END);
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
