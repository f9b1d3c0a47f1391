"""``rota runs``: the runs (occurrences) of jobs: list, show, logs (``--follow``), cancel."""

from __future__ import annotations

import sys
import time
from typing import Annotated
from uuid import UUID

import orjson
import typer

from rota.api.schemas.occurrences import LogLine, OccurrenceDetail, OccurrenceOut
from rota.cli.ops import output
from rota.cli.ops.jobs import AllOpt, CursorOpt, LimitOpt, collect, resolve
from rota.cli.ops.output import JsonOpt
from rota.cli.ops.session import connect
from rota.client import SyncClient
from rota.core.models import OccurrenceStatus

app = typer.Typer(help="Runs (occurrences) of jobs: list, show, logs, cancel.")

RunArg = Annotated[UUID, typer.Argument(help="The run's (occurrence's) id.")]
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
            run.job_type,
            output.status(run.status_name),
            output.when(run.scheduled_for),
            output.when(run.start_time),
            output.duration(run.duration_ms),
            run.attempt,
            run.instance_id,
        )
        for run in items
    ]
    columns = ["id", "type", "status", "scheduled (UTC)", "started", "took", "try", "worker"]
    output.show(output.table(None, columns, rows))
    output.more(cursor)


@app.command("show")
def show(run: RunArg, json: JsonOpt = False) -> None:
    """One run with its status history."""
    with connect() as client:
        detail = client.get_occurrence(run)
    if json:
        output.print_json(detail)
        return
    output.show(
        output.fields(
            f"run {detail.id}",
            [
                ("id", detail.id),
                ("job", detail.job_id),
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
        if not follow:
            client.get_occurrence(run)  # a run that does not exist: exit 4, not an empty log
            _drain(client, run, 0, json)
            return
        try:
            _follow(client, run, json)
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


@app.command("cancel")
def cancel(
    run: RunArg,
    reason: Annotated[str | None, typer.Option(help="Why (kept with the run).")] = None,
    json: JsonOpt = False,
) -> None:
    """Cancel a Queued run (at once) or a Running one (its worker stops it)."""
    with connect() as client:
        detail = client.cancel(run, reason=reason)
    if json:
        output.print_json(detail)
        return
    output.err_print(f"run {detail.id}: {detail.status_name}")
