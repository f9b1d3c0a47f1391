"""``rota limits``: cluster-wide limits of job types (at most N at once, per type or per value
of a job data field; at most R starts per second): list, set, delete."""

from __future__ import annotations

from typing import Annotated

import typer

from rota.api.schemas.limits import LimitsOut
from rota.cli.ops import output
from rota.cli.ops.output import JsonOpt
from rota.cli.ops.session import USAGE, connect, fail

app = typer.Typer(help="Cluster-wide limits of job types: list, set, delete.")

TypeArg = Annotated[str, typer.Argument(help="The job type.")]


def _show(answer: LimitsOut) -> None:
    rows = [
        (
            x.job_type,
            "-" if x.max_concurrent is None else x.max_concurrent,
            x.key or "-",
            "-" if x.rate_per_second is None else f"{x.rate_per_second:g}/s",
            x.running,
            x.waiting,
        )
        for x in answer.limits
    ]
    columns = ["type", "max", "per key", "rate", "running", "waiting"]
    output.show(output.table(None, columns, rows))


@app.command("list")
def list_limits(
    waiting: Annotated[
        bool, typer.Option("--waiting", help="Also list the occurrences waiting for a limit.")
    ] = False,
    json: JsonOpt = False,
) -> None:
    """List the limits, with the slots held and the occurrences waiting now."""
    with connect() as client:
        answer = client.limits()
    if json:
        output.print_json(answer)
        return
    _show(answer)
    if waiting:
        rows = [(w.occurrence_id, w.limit, output.when(w.since)) for w in answer.waiting]
        output.show(output.table("waiting", ["occurrence", "limit", "since (UTC)"], rows))


@app.command("set")
def set_limit(
    job_type: TypeArg,
    max_concurrent: Annotated[
        int | None,
        typer.Option("--max", help="At most this many run at once, cluster-wide."),
    ] = None,
    key: Annotated[
        str | None,
        typer.Option(help="A job data field: --max applies per distinct value of it."),
    ] = None,
    rate: Annotated[float | None, typer.Option(help="At most this many starts per second.")] = None,
    json: JsonOpt = False,
) -> None:
    """Set the limits of one job type (Admin); the others are kept."""
    if max_concurrent is None and rate is None:
        fail("give --max, --rate or both", USAGE)
    with connect() as client:
        answer = client.set_limit(job_type, max=max_concurrent, key=key, rate_per_second=rate)
    if json:
        output.print_json(answer)
        return
    _show(answer)


@app.command("delete")
def delete_limit(job_type: TypeArg) -> None:
    """Lift the limits of one job type (Admin)."""
    with connect() as client:
        client.delete_limit(job_type)
    output.console().print(f"limits of {output.esc(job_type)} lifted")
