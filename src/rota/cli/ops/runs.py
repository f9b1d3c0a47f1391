"""``rota runs``: the runs (occurrences) of jobs: list, show, logs (``--follow``), cancel,
re-run and retry — one, several, or every one a filter matches."""

from __future__ import annotations

import sys
import time
from typing import Annotated, Any
from uuid import UUID

import orjson
import typer

from rota.api.schemas.occurrences import LogLine, OccurrenceDetail, OccurrenceOut
from rota.cli.ops import bulk, output, refs
from rota.cli.ops.jobs import AllOpt, CursorOpt, LimitOpt, collect, resolve
from rota.cli.ops.output import JsonOpt
from rota.cli.ops.session import connect
from rota.client import SyncClient
from rota.core.models import OccurrenceStatus

app = typer.Typer(help="Runs (occurrences) of jobs: list, show, logs, cancel, re-run, retry.")

BULK = "/occurrences/bulk"
FAILED_BULK = "/failed-occurrences/bulk"

RunArg = Annotated[str, typer.Argument(help=f"The run (occurrence): {refs.ID_HELP}.")]
POLL = 0.5
"""Seconds between two looks at a run that is followed or waited for."""
LOG_PAGE = 1000
QUIET_LOOKS = 4
"""Looks (every half :data:`POLL`) without a new line after a followed run ended: then stop."""


def ended(run: OccurrenceOut) -> bool:
    return OccurrenceStatus(run.status).is_terminal


def wait_until_ended(client: SyncClient, run_id: UUID) -> OccurrenceDetail:
    """Look at the run every :data:`POLL` seconds until it has ended."""
    while True:
        run = client.get_occurrence(run_id)
        if ended(run):
            return run
        time.sleep(POLL)


@app.command("list")
def list_runs(
    job: Annotated[str | None, typer.Option(help="Only this job's runs (id or name).")] = None,
    status: Annotated[
        list[str] | None,
        typer.Option(help="Only runs in this status (name or code; repeat for more)."),
    ] = None,
    query: Annotated[
        str | None,
        typer.Option(
            "--query",
            "-q",
            help="Query filter: type:report status:failed data.customer:42 after:-1d "
            'worker:reports attempt:>1 job:"nightly sales" (see docs/api.md).',
        ),
    ] = None,
    limit: LimitOpt = 50,
    cursor: CursorOpt = None,
    every: AllOpt = False,
    json: JsonOpt = False,
) -> None:
    """List runs, newest first."""
    with connect() as client:
        job_id = resolve(client, job).id if job is not None else None
        items, cursor = collect(
            lambda size, after: client.list_occurrences(
                job_id=job_id,
                status=list(status) if status else None,
                query=query,
                limit=size,
                cursor=after,
            ),
            limit,
            cursor,
            every,
        )
    if json:
        output.print_json({"items": items, "nextCursor": cursor})
        return
    rows = [
        (
            run.id,
            output.job_name(run.job_display_name, run.job_type),
            output.status(run.status_name),
            output.when(run.scheduled_for),
            output.when(run.start_time),
            output.duration(run.duration_ms),
            run.attempt,
            run.instance_id,
        )
        for run in items
    ]
    columns = ["id", "job", "status", "scheduled (UTC)", "started", "took", "try", "worker"]
    output.show(output.table(None, columns, rows))
    output.more(cursor)


@app.command("show")
def show(run: RunArg, json: JsonOpt = False) -> None:
    """One run with its status history."""
    with connect() as client:
        detail = client.get_occurrence(refs.match_id(client, "occurrence", run, "run"))
    if json:
        output.print_json(detail)
        return
    output.show(
        output.fields(
            f"run {detail.id}",
            [
                ("id", detail.id),
                (
                    "job",
                    f"{output.job_name(detail.job_display_name, detail.job_type)} "
                    f"({detail.job_id})",
                ),
                ("type", detail.job_type),
                ("status", output.status(detail.status_name)),
                ("attempt", f"{detail.attempt} (max retries {detail.max_retries})"),
                ("worker", detail.instance_id or detail.worker_id),
                ("scheduled (UTC)", output.when(detail.scheduled_for)),
                ("started (UTC)", output.when(detail.start_time)),
                ("ended (UTC)", output.when(detail.end_time)),
                ("took", output.duration(detail.duration_ms)),
                ("trigger reason", detail.trigger_reason),
                ("skip reason", detail.skip_reason),
                ("data", output.compact(detail.job_data, 2000)),
                ("result", output.compact(detail.result, 2000)),
                ("exception", detail.exception),
            ],
        )
    )
    history = [
        (
            output.when(change.timestamp),
            change.from_.name.title() if change.from_ is not None else "-",
            change.to.name.title(),
            change.attempt,
            change.reason,
        )
        for change in detail.status_change_logs
    ]
    output.show(output.table("history", ["at (UTC)", "from", "to", "try", "reason"], history))


def _print_line(line: LogLine, json: bool) -> None:
    if json:
        sys.stdout.write(orjson.dumps(output.as_json(line)).decode() + "\n")
    else:
        extra = f" {output.compact(line.data)}" if line.data else ""
        sys.stdout.write(
            f"{output.when(line.timestamp)} {line.level.upper():<7} {line.message}{extra}\n"
        )
    sys.stdout.flush()


def _drain(client: SyncClient, run: UUID, after: int, json: bool) -> tuple[int, int]:
    """Print every line after ``after``; the new position and how many lines were printed."""
    printed = 0
    while True:
        page = client.logs(run, after=after, limit=LOG_PAGE)
        for line in page.items:
            _print_line(line, json)
        printed += len(page.items)
        after = max(after, page.next_after)
        if len(page.items) < LOG_PAGE:
            return after, printed


@app.command("logs")
def logs(
    run: RunArg,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new lines until the run ends.")
    ] = False,
    json: Annotated[
        bool, typer.Option("--json", help="One JSON object per line (JSON Lines).")
    ] = False,
) -> None:
    """The run's log lines (times in UTC)."""
    with connect() as client:
        run_id = refs.match_id(client, "occurrence", run, "run")
        if not follow:
            client.get_occurrence(run_id)  # a run that does not exist: exit 4, no empty log
            _drain(client, run_id, 0, json)
            return
        try:
            _follow(client, run_id, json)
        except KeyboardInterrupt:  # Ctrl-C ends a follow: what the user asked for
            return


def _follow(client: SyncClient, run: UUID, json: bool) -> None:
    """Print the run's lines as they come until it has ended (and its last lines are in)."""
    after = 0
    quiet_after_end = 0
    while True:
        state = client.get_occurrence(run)
        after, printed = _drain(client, run, after, json)
        if ended(state):
            # The last lines may be stored just after the final status (they travel apart):
            # stop after a second without new ones.
            quiet_after_end = 0 if printed else quiet_after_end + 1
            if quiet_after_end >= QUIET_LOOKS:
                return
            time.sleep(POLL / 2)
            continue
        time.sleep(POLL)


RunIds = Annotated[
    list[str] | None,
    typer.Argument(help="Runs' ids (or their shown last digits); or --all with filters."),
]
EveryOpt = bulk.EveryOpt
JobOpt = bulk.JobOpt
StatusOpt = Annotated[
    list[str] | None,
    typer.Option("--status", help="Only runs in this status (name or code; repeat for more)."),
]


def _run_filters(
    job: str | None,
    status: list[str] | None,
    since: str | None,
    until: str | None,
    query: str | None = None,
) -> dict[str, Any]:
    return {
        "jobId": bulk.job_id_of(job),
        "status": status or [],
        "scheduledAfter": since,
        "scheduledBefore": until,
        "q": query,
    }


@app.command("cancel")
def cancel(
    run: RunIds = None,
    reason: Annotated[str | None, typer.Option(help="Why (kept with the run).")] = None,
    every: EveryOpt = False,
    query: bulk.QueryOpt = None,
    job: JobOpt = None,
    status: StatusOpt = None,
    since: bulk.SinceOpt = None,
    until: bulk.UntilOpt = None,
    yes: bulk.YesOpt = False,
    json: JsonOpt = False,
) -> None:
    """Cancel a Queued run (at once) or a Running one (its worker stops it). Several ids, or
    --all with filters (default: the Queued and Running ones of the filter), are counted
    and confirmed first."""
    if run and len(run) == 1 and not every:
        with connect() as client:
            detail = client.cancel(
                refs.match_id(client, "occurrence", run[0], "run"), reason=reason
            )
        if json:
            output.print_json(detail)
            return
        output.err_print(f"run {detail.id}: {detail.status_name}")
        return
    default = None if query and "status:" in query else ["Queued", "Running"]
    filters = _run_filters(job, status or default, since, until, query)
    ids = refs.match_ids("occurrence", run or (), "run")
    chosen = bulk.selection(ids, filters if every else {}, every, "run")
    body: dict[str, Any] = {"action": "cancel", **chosen, "reason": reason}
    bulk.run_bulk(BULK, body, verb="Cancel", noun="runs", yes=yes, json=json)


@app.command("rerun")
def rerun(
    run: RunIds = None,
    reason: Annotated[str | None, typer.Option(help="Why (kept with each new run).")] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Run a Skip-policy job even while a run of it is on.")
    ] = False,
    per_second: Annotated[
        float | None,
        typer.Option(
            "--per-second",
            min=0.001,
            max=1000,
            help="Pace the new runs: this many a second (each scheduled in turn).",
        ),
    ] = None,
    every: EveryOpt = False,
    query: bulk.QueryOpt = None,
    job: JobOpt = None,
    status: StatusOpt = None,
    since: bulk.SinceOpt = None,
    until: bulk.UntilOpt = None,
    yes: bulk.YesOpt = False,
    json: JsonOpt = False,
) -> None:
    """Run the jobs of these runs again, each with its run's data (a new run each; the old
    ones keep their record). --all with filters: e.g. the Failed runs of a job in a window
    (--status Failed --since …); counted and confirmed first. --per-second paces them (a
    replay that does not flood the workers)."""
    filters = _run_filters(job, status, since, until, query)
    ids = refs.match_ids("occurrence", run or (), "run")
    chosen = bulk.selection(ids, filters if every else {}, every, "run")
    body: dict[str, Any] = {"action": "rerun", **chosen, "reason": reason, "force": force}
    if per_second is not None:
        body["perSecond"] = per_second
    bulk.run_bulk(BULK, body, verb="Re-run", noun="runs", yes=yes, json=json)


@app.command("retry")
def retry(
    every: EveryOpt = False,
    query: bulk.QueryOpt = None,
    job: JobOpt = None,
    since: bulk.SinceOpt = None,
    until: bulk.UntilOpt = None,
    yes: bulk.YesOpt = False,
    json: JsonOpt = False,
) -> None:
    """Retry every open failed run the filters match (of a job, failed in a window) as a
    new attempt: `rota failed retry --all` by another name."""
    filters = {
        "jobId": bulk.job_id_of(job),
        "failedAfter": since,
        "failedBefore": until,
        "q": query,
    }
    chosen = bulk.selection([], filters, every, "run")
    body = {"action": "retry", **chosen}
    bulk.run_bulk(FAILED_BULK, body, verb="Retry", noun="failed runs", yes=yes, json=json)
