"""``rota failed``: the failed runs kept for an operator (dead letters): list, show, retry,
resolve, delete — one, several, or every one a filter matches."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any
from uuid import UUID

import typer

from rota.api.schemas.failed import FailedOccurrenceOut
from rota.cli.ops import bulk, output, refs
from rota.cli.ops.jobs import AllOpt, CursorOpt, LimitOpt, collect, resolve
from rota.cli.ops.output import JsonOpt
from rota.cli.ops.session import USAGE, connect, fail
from rota.client import SyncClient

app = typer.Typer(help="Failed runs (dead letters): list, show, retry, resolve, delete.")

BULK = "/failed-occurrences/bulk"

FailedArg = Annotated[
    str, typer.Argument(help=f"The failed record (see `rota failed list`): {refs.ID_HELP}.")
]


def _one(client: SyncClient, ref: str) -> UUID:
    return refs.match_id(client, "failed", ref, "failed record")


def _ids(refs_given: list[str] | None) -> list[str]:
    return refs.match_ids("failed", refs_given or (), "failed record")


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
    query: Annotated[
        str | None,
        typer.Option(
            "--query",
            "-q",
            help="Query filter: type:report failure:timed_out data.customer:42 after:-1d "
            "attempt:>1 (with status:resolved, add --state all; see docs/api.md).",
        ),
    ] = None,
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
            record.id,
            output.job_name(record.job_display_name, record.job_type),
            record.failure_type.value,
            output.when(record.failed_at),
            record.attempts,
            "yes" if record.resolved else "no",
            output.compact(record.exception, 80),
        )
        for record in items
    ]
    columns = ["id", "job", "failure", "failed (UTC)", "tries", "resolved", "exception"]
    output.show(output.table(None, columns, rows))
    output.more(cursor)


def _show(record: FailedOccurrenceOut) -> None:
    output.show(
        output.fields(
            f"failed run {record.id}",
            [
                ("id", record.id),
                ("run", record.occurrence_id),
                (
                    "job",
                    f"{output.job_name(record.job_display_name, record.job_type)} "
                    f"({record.job_id or '-'})",
                ),
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
        record = client.get_failed(refs.match_id(client, "failed", failed, "failed record"))
    if json:
        output.print_json(record)
        return
    _show(record)


FailedIds = Annotated[
    list[str] | None,
    typer.Argument(
        help="Failed records' ids or their shown last digits (see `rota failed list`); or "
        "--all with filters."
    ),
]
EveryOpt = bulk.EveryOpt
JobOpt = bulk.JobOpt
TypeOpt = Annotated[
    list[str] | None,
    typer.Option("--type", help="Only this failure type (timed_out, zombie, …; repeat for more)."),
]


def _filters(
    job: str | None,
    types: list[str] | None,
    since: str | None,
    until: str | None,
    query: str | None = None,
) -> dict[str, Any]:
    return {
        "jobId": bulk.job_id_of(job),
        "failureType": types or [],
        "failedAfter": since,
        "failedBefore": until,
        "q": query,
    }


@app.command("retry")
def retry(
    failed: FailedIds = None,
    every: EveryOpt = False,
    query: bulk.QueryOpt = None,
    job: JobOpt = None,
    failure_type: TypeOpt = None,
    since: bulk.SinceOpt = None,
    until: bulk.UntilOpt = None,
    yes: bulk.YesOpt = False,
    json: JsonOpt = False,
) -> None:
    """Run them again as new attempts (this resolves their records): one id prints its run;
    several ids, or --all with filters (the open records of a job, a failure type, a time
    window), are counted and confirmed first, then retried a thousand at a time."""
    if failed and len(failed) == 1 and not every:
        with connect() as client:
            run = client.retry_failed(_one(client, failed[0]))
        if json:
            output.print_json(run)
            return
        output.err_print(f"[green]retrying[/green]: run {run.id}, attempt {run.attempt}")
        print(run.id)
        return
    chosen = bulk.selection(
        _ids(failed), _filters(job, failure_type, since, until, query), every, "failed"
    )
    body = {"action": "retry", **chosen}
    bulk.run_bulk(BULK, body, verb="Retry", noun="failed runs", yes=yes, json=json)


@app.command("delete")
def delete(
    failed: FailedIds = None,
    every: EveryOpt = False,
    query: bulk.QueryOpt = None,
    job: JobOpt = None,
    failure_type: TypeOpt = None,
    since: bulk.SinceOpt = None,
    until: bulk.UntilOpt = None,
    resolved: Annotated[
        bool, typer.Option("--resolved", help="With --all: the resolved records, not the open.")
    ] = False,
    yes: bulk.YesOpt = False,
    json: JsonOpt = False,
) -> None:
    """Delete failed-run records (the runs themselves are kept): ids, or --all with filters
    (open records unless --resolved); counted and confirmed first."""
    filters = _filters(job, failure_type, since, until, query)
    chosen = bulk.selection(_ids(failed), filters, every, "failed")
    if "filter" in chosen and resolved:
        chosen["filter"]["resolved"] = True
    body = {"action": "delete", **chosen}
    bulk.run_bulk(BULK, body, verb="Delete", noun="failed-run records", yes=yes, json=json)


@app.command("resolve")
def resolve_failed(
    failed: FailedIds = None,
    note: Annotated[str | None, typer.Option(help="What was done or found.")] = None,
    action: Annotated[
        str | None, typer.Option(help="A short action name (e.g. ignored, fixed-data).")
    ] = None,
    reopen: Annotated[bool, typer.Option("--reopen", help="Mark it unresolved again.")] = False,
    every: EveryOpt = False,
    query: bulk.QueryOpt = None,
    job: JobOpt = None,
    failure_type: TypeOpt = None,
    since: bulk.SinceOpt = None,
    until: bulk.UntilOpt = None,
    yes: bulk.YesOpt = False,
    json: JsonOpt = False,
) -> None:
    """Mark a failed run resolved (with a note or action), or reopen it; several ids, or
    --all with filters, are counted and confirmed first (a note, no action, in bulk)."""
    if reopen and (note is not None or action is not None):
        fail("--reopen takes no --note or --action", USAGE)
    if failed and len(failed) == 1 and not every:
        with connect() as client:
            record = client.resolve_failed(
                _one(client, failed[0]), note=note, action=action, resolved=not reopen
            )
        if json:
            output.print_json(record)
            return
        word = "reopened" if reopen else "resolved"
        output.err_print(f"[green]{word}[/green] {record.id}")
        return
    if action is not None:
        fail("--action is for one record; in bulk give --note", USAGE)
    filters = _filters(job, failure_type, since, until, query)
    chosen = bulk.selection(_ids(failed), filters, every, "failed")
    body: dict[str, Any] = {"action": "reopen" if reopen else "resolve", **chosen}
    if note is not None:
        body["note"] = note
    verb = "Reopen" if reopen else "Resolve"
    bulk.run_bulk(BULK, body, verb=verb, noun="failed runs", yes=yes, json=json)
