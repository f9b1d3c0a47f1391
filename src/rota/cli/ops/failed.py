"""``rota failed``: the failed runs kept for an operator (dead letters): list, show, retry,
resolve."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated
from uuid import UUID

import typer

from rota.api.schemas.failed import FailedOccurrenceOut
from rota.cli.ops import output
from rota.cli.ops.jobs import AllOpt, CursorOpt, LimitOpt, collect, resolve
from rota.cli.ops.output import JsonOpt
from rota.cli.ops.session import USAGE, connect, fail

app = typer.Typer(help="Failed runs (dead letters): list, show, retry, resolve.")

FailedArg = Annotated[UUID, typer.Argument(help="The failed record's id (see `rota failed list`).")]


class State(StrEnum):
    open = "open"
    resolved = "resolved"
    all = "all"


@app.command("list")
def list_failed(
    job: Annotated[str | None, typer.Option(help="Only this job's (id or name).")] = None,
    failure_type: Annotated[
        list[str] | None,
        typer.Option(
            "--type",
            help="Only this failure type (retries_exhausted, permanent, timed_out, zombie, "
            "poison, unknown_job_type, invalid_data; repeat for more).",
        ),
    ] = None,
    state: Annotated[State, typer.Option(help="Open (unresolved), resolved, or all.")] = State.open,
    limit: LimitOpt = 50,
    cursor: CursorOpt = None,
    every: AllOpt = False,
    json: JsonOpt = False,
) -> None:
    """List failed runs, newest first (by default the open ones)."""
    resolved = {State.open: False, State.resolved: True, State.all: None}[state]
    with connect() as client:
        job_id = resolve(client, job).id if job is not None else None
        items, cursor = collect(
            lambda size, after: client.list_failed(
                job_id=job_id,
                failure_type=list(failure_type) if failure_type else None,
                resolved=resolved,
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
            record.id,
            record.job_type,
            record.failure_type.value,
            output.when(record.failed_at),
            record.attempts,
            "yes" if record.resolved else "no",
            output.compact(record.exception, 80),
        )
        for record in items
    ]
    columns = ["id", "type", "failure", "failed (UTC)", "tries", "resolved", "exception"]
    output.show(output.table(None, columns, rows))
    output.more(cursor)


def _show(record: FailedOccurrenceOut) -> None:
    output.show(
        output.fields(
            f"failed run {record.id}",
            [
                ("id", record.id),
                ("run", record.occurrence_id),
                ("job", record.job_id),
                ("type", record.job_type),
                ("failure", record.failure_type.value),
                ("failed (UTC)", output.when(record.failed_at)),
                ("attempts", record.attempts),
                ("data", output.compact(record.job_data, 2000)),
                ("resolved", "yes" if record.resolved else "no"),
                ("resolved by", record.resolved_by),
                ("resolved (UTC)", output.when(record.resolved_at)),
                ("note", record.resolution_note),
                ("action", record.resolution_action),
                ("exception", record.exception),
            ],
        )
    )


@app.command("show")
def show(failed: FailedArg, json: JsonOpt = False) -> None:
    """One failed run with its exception."""
    with connect() as client:
        record = client.get_failed(failed)
    if json:
        output.print_json(record)
        return
    _show(record)


@app.command("retry")
def retry(failed: FailedArg, json: JsonOpt = False) -> None:
    """Run it again as a new attempt (this resolves the record); prints the run."""
    with connect() as client:
        run = client.retry_failed(failed)
    if json:
        output.print_json(run)
        return
    output.err_print(f"[green]retrying[/green]: run {run.id}, attempt {run.attempt}")
    print(run.id)


@app.command("resolve")
def resolve_failed(
    failed: FailedArg,
    note: Annotated[str | None, typer.Option(help="What was done or found.")] = None,
    action: Annotated[
        str | None, typer.Option(help="A short action name (e.g. ignored, fixed-data).")
    ] = None,
    reopen: Annotated[bool, typer.Option("--reopen", help="Mark it unresolved again.")] = False,
    json: JsonOpt = False,
) -> None:
    """Mark a failed run resolved (with a note or action), or reopen it."""
    if reopen and (note is not None or action is not None):
        fail("--reopen takes no --note or --action", USAGE)
    with connect() as client:
        record = client.resolve_failed(failed, note=note, action=action, resolved=not reopen)
    if json:
        output.print_json(record)
        return
    word = "reopened" if reopen else "resolved"
    output.err_print(f"[green]{word}[/green] {record.id}")
