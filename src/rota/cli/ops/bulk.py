"""The bulk actions of ``rota runs`` and ``rota failed`` (``POST /occurrences/bulk``,
``POST /failed-occurrences/bulk``): what a filter matches is counted first (a dry run) and
confirmed (``--yes`` skips the question), then acted on a thousand at a time until nothing
more matches, with progress on stderr; the answer of each call with ``--json``."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from rota.cli.ops import output
from rota.cli.ops.refs import resolve
from rota.cli.ops.session import USAGE, connect, fail
from rota.client import SyncClient

YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]
SinceOpt = Annotated[
    str | None, typer.Option("--since", help="ISO time (naive: UTC): only those from it on.")
]
UntilOpt = Annotated[str | None, typer.Option("--until", help="ISO time: only those before it.")]
EveryOpt = Annotated[bool, typer.Option("--all", help="Every one the filters match.")]
JobOpt = Annotated[str | None, typer.Option("--job", help="Only this job's (id or name).")]
QueryOpt = Annotated[
    str | None,
    typer.Option(
        "--query",
        "-q",
        help='With --all: a query filter, e.g. "tag:nightly type:report after:-12h" (docs/api.md).',
    ),
]
MAX_ROUNDS = 1000
"""Calls of one bulk command at most (a million items)."""


def job_id_of(job: str | None) -> str | None:
    """The id of the job ``job`` names (its id, shown digits or unique name), or ``None``."""
    if job is None:
        return None
    with connect() as client:
        return str(resolve(client, job).id)


def _post(client: SyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    answer: dict[str, Any] = client.call(client.client.request("POST", path, json=body))
    return answer


def run_bulk(
    path: str,
    body: dict[str, Any],
    *,
    verb: str,
    noun: str,
    yes: bool,
    json: bool,
) -> None:
    """Count, confirm, then act until the selection is done; exit code 1 when some item
    could not be done (each is named on stderr)."""
    answers: list[dict[str, Any]] = []
    errors = 0
    with connect() as client:
        counted = _post(client, path, {**body, "dryRun": True})
        matched, more = counted["matched"], counted["more"]
        if matched == 0:
            output.err_print(f"nothing to {verb.lower()}: no {noun} match")
            if json:
                output.print_json([counted])
            return
        many = f"{matched}{'+' if more else ''}"
        if not yes and not typer.confirm(f"{verb} {many} {noun}?", default=False, err=True):
            fail("nothing done", USAGE)
        done = 0
        created = 0
        for _ in range(MAX_ROUNDS):
            if body.get("perSecond"):  # a paced re-run goes on where the last call ended
                body["startAfterSeconds"] = created / body["perSecond"]
            answer = _post(client, path, body)
            created += len(answer["created"])
            answers.append(answer)
            done += answer["done"]
            errors += len(answer["errors"])
            for error in answer["errors"]:
                output.err_print(f"[red]not done[/red] {error['id']}: {error['message']}")
            output.err_print(f"{verb.lower()}: {done} done, {errors} not done")
            # With ids there is one round; with a filter, the next round holds what is left
            # (what was done no longer matches; what failed would match again: stop).
            if not answer["more"] or answer["done"] == 0 or "ids" in body:
                break
    if json:
        output.print_json(answers)
    if errors:
        raise typer.Exit(1)


def selection(
    ids: list[str] | None, filters: dict[str, Any], every: bool, what: str
) -> dict[str, Any]:
    """``{"ids": …}`` or ``{"filter": …}``: ids given, or ``--all`` with the filters."""
    if ids:
        if every or any(v not in (None, [], False) for v in filters.values()):
            fail(f"give {what} ids or --all with filters, not both", USAGE)
        return {"ids": ids}
    if not every:
        fail(f"give {what} ids, or --all (with filters) for every one that matches", USAGE)
    return {"filter": {k: v for k, v in filters.items() if v not in (None, [])}}
