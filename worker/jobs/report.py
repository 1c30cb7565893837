"""`report.generate`, `report.chunk` and `report.assemble`: reports that fan out as a
batch, show progress and are assembled exactly once.

`report.generate` — payload `{"report": "activity", "params": {...}, "requested_by":
"ana"}` — validates the request, creates a `report_runs` row, plans keyset slices of
at most `JOBDESK_REPORT_CHUNK_ROWS` source rows (default 5000) and enqueues them as one
batch (`enqueue_batch`): a `report.chunk` child per slice and `report.assemble` as its
`on_success` callback, all in one transaction — either the whole fan-out exists or none
of it. Re-running the same job finds its run and does not fan out twice.

`report.chunk` aggregates its slice in the database and stores the result once. When
every chunk succeeded, the batch releases `report.assemble` (in the transaction of the
last chunk's success), which merges the stored results into the CSV
(`JOBDESK_REPORTS_DIR`, default `./reports`, file `<report>-<run id>.csv`), written to a
temporary file and renamed into place. A chunk that fails retries on its own; when a
chunk gives up, the run is marked `failed` (the dashboard can retry its failed chunks:
a retried chunk takes the dead one's place in the batch, so the assembly still follows).
Each chunk runs under the type's hard timeout (300 s) and checks `ctx.cancelled`.
"""

from __future__ import annotations

import csv
import os
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.enqueue import NewJob
from jobdesk.shared.core.errors import PermanentError, Snooze, ValidationError
from jobdesk.shared.core.retry import ExponentialBackoff
from jobdesk.shared.reports import runs as reports
from jobdesk.shared.reports.definitions import (
    ReportDefinition,
    aggregate_slice,
    get_report,
    plan_slices,
)
from jobdesk.shared.workflows.batches import enqueue_batch
from jobdesk.worker.context import JobContext
from jobdesk.worker.jobs.config import jobs_config
from jobdesk.worker.registry import job

CHUNK_BACKOFF = ExponentialBackoff(base=timedelta(seconds=10), cap=timedelta(minutes=10))
MAX_REQUESTED_BY = 100


def _definition(name: object) -> ReportDefinition:
    if not isinstance(name, str) or not name:
        raise PermanentError("payload.report must be a report name")
    definition = get_report(name)
    if definition is None:
        raise PermanentError(f"unknown report {name!r}")
    return definition


@job("report.generate")
def generate_report(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Create the run and fan out its chunk jobs in one transaction."""
    definition = _definition(payload.get("report"))
    requested_by = payload.get("requested_by")
    if requested_by is not None and (
        not isinstance(requested_by, str) or len(requested_by) > MAX_REQUESTED_BY
    ):
        raise PermanentError(f"payload.requested_by must be a string of <= {MAX_REQUESTED_BY}")
    cfg = jobs_config(ctx.settings)
    with ctx.engine.begin() as conn:
        existing = reports.find_run_for_job(conn, ctx.job_id)
        if existing is not None:
            return {"run_id": existing["id"], "chunks": existing["chunks_total"]}
        now = db_now(conn)
        try:
            params = definition.parse_params(payload.get("params") or {}, now)
        except ValidationError as exc:
            raise PermanentError(str(exc)) from None
        run_id = reports.create_run(
            conn,
            job_id=ctx.job_id,
            report=definition.name,
            params=params,
            requested_by=requested_by,
            now=now,
        )
        slices = plan_slices(conn, definition, params, cfg.report_chunk_rows)
        # A run without slices is a batch without children: the assembly is released
        # at once and writes a file with the header only.
        enqueue_batch(
            conn,
            [
                NewJob(
                    "report.chunk",
                    {"run_id": run_id, "chunk": index, "after_id": after, "upto_id": upto},
                    idempotency_key=reports.chunk_key(run_id, index),
                )
                for index, (after, upto) in enumerate(slices)
            ],
            on_success=NewJob("report.assemble", {"run_id": run_id}),
            name=f"report {definition.name} run {run_id}",
        )
        reports.set_chunks_total(conn, run_id, len(slices))
    ctx.log.info(
        "report %s run %s: %d chunks",
        definition.name,
        run_id,
        len(slices),
        extra={"action": "report_fanout", "run_id": run_id},
    )
    return {"run_id": run_id, "chunks": len(slices), "report": definition.name}


def _int_field(payload: dict[str, Any], name: str) -> int:
    value = payload.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise PermanentError(f"payload.{name} must be a non-negative integer")
    return value


@job("report.chunk", backoff=CHUNK_BACKOFF)
def report_chunk(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Aggregate one slice, store it once; the last chunk assembles the output."""
    run_id = _int_field(payload, "run_id")
    index = _int_field(payload, "chunk")
    after = _int_field(payload, "after_id")
    upto = _int_field(payload, "upto_id")
    try:
        return _run_chunk(ctx, run_id, index, after, upto)
    except Snooze:
        raise
    except Exception as exc:
        if ctx.is_last_attempt or isinstance(exc, PermanentError):
            with ctx.engine.begin() as conn:
                reports.fail_run(conn, run_id, error=f"chunk {index}: {exc}", now=db_now(conn))
        raise


def _run_chunk(ctx: JobContext, run_id: int, index: int, after: int, upto: int) -> dict[str, Any]:
    with ctx.engine.connect() as conn:
        run = reports.get_run(conn, run_id)
    if run is None:
        raise PermanentError(f"report run {run_id} does not exist")
    if run["status"] in (reports.CANCELLED, reports.SUCCEEDED):
        return {"run_id": run_id, "chunk": index, "skipped": f"run {run['status']}"}
    definition = _definition(run["report"])
    params = run["params"] or {}
    with ctx.engine.begin() as conn:
        done = reports.chunk_recorded(conn, run_id, index)
    rows = 0
    if not done:
        if ctx.cancelled.is_set():
            raise TimeoutError("chunk stopped before it started (cancelled)")
        with ctx.engine.begin() as conn:
            rows, groups = aggregate_slice(conn, definition, params, after, upto)
            reports.record_chunk_result(
                conn, run_id, index, rows=rows, data={"groups": groups}, now=db_now(conn)
            )
    return {"run_id": run_id, "chunk": index, "rows": rows}


@job("report.assemble", backoff=CHUNK_BACKOFF)
def assemble_report(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """The batch's `on_success`: every chunk succeeded; assemble the run's file once."""
    run_id = _int_field(payload, "run_id")
    with ctx.engine.begin() as conn:
        run = reports.get_run(conn, run_id)
        if run is None:
            raise PermanentError(f"report run {run_id} does not exist")
        if run["status"] in (reports.SUCCEEDED, reports.CANCELLED):
            return {"run_id": run_id, "skipped": f"run {run['status']}"}
        # Compare-and-set `running -> assembling`; a re-run (its worker died while
        # assembling) finds it assembling and finishes it.
        claimed = reports.claim_assembly(conn, run_id) or run["status"] == reports.ASSEMBLING
    if not claimed:
        raise RuntimeError(f"report run {run_id} is {run['status']}, not ready to assemble")
    definition = _definition(run["report"])
    return {"run_id": run_id, "assembled": assemble(ctx, run_id, definition)}


#: A spreadsheet reads a cell starting with one of these as a formula (OWASP "CSV
#: injection"): `=HYPERLINK(...)` in a job type or subject would run when opened.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """A value as a CSV cell a spreadsheet shows as text: text that would start a formula
    gets a leading `'`; empty for None; numbers as they are."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def assemble(ctx: JobContext, run_id: int, definition: ReportDefinition) -> dict[str, Any]:
    """Merge the stored chunk results into the CSV and mark the run succeeded."""
    cfg = jobs_config(ctx.settings)
    totals: dict[tuple[Any, ...], int] = {}
    with ctx.engine.connect() as conn:
        for _index, data in reports.iter_chunk_results(conn, run_id):
            for group in data.get("groups", []):
                key = tuple(group[:-1])
                totals[key] = totals.get(key, 0) + int(group[-1])
    directory = cfg.reports_dir
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"{definition.name}-{run_id}.csv"
    temporary = directory / f".{final.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp"
    try:
        with temporary.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(definition.columns)
            for key in sorted(totals, key=lambda k: tuple("" if v is None else v for v in k)):
                writer.writerow([*(csv_cell(v) for v in key), totals[key]])
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, final)
    finally:
        temporary.unlink(missing_ok=True)
    size = final.stat().st_size
    with ctx.engine.begin() as conn:
        now = db_now(conn)
        reports.finish_run(
            conn,
            run_id,
            file_path=str(Path(final).resolve()),
            size_bytes=size,
            now=now,
            expires_at=now + timedelta(days=cfg.report_retention_days),
        )
    ctx.log.info(
        "report run %s assembled: %s (%d bytes)",
        run_id,
        final,
        size,
        extra={"action": "report_assembled", "run_id": run_id},
    )
    return {"file": str(final), "size_bytes": size, "output_rows": len(totals)}
