"""``rota graph-runs``: the runs of job dependency graphs (list, show)."""

from __future__ import annotations

from typing import Annotated

import typer

from rota.cli.ops import output, refs
from rota.cli.ops.jobs import resolve
from rota.cli.ops.output import JsonOpt
from rota.cli.ops.session import connect

app = typer.Typer(help="Graph runs: one run of a job dependency graph, its occurrences.")


@app.command("list")
def list_runs(
    job: Annotated[
        str | None, typer.Option("--job", help="Rooted at this job (id or unique name).")
    ] = None,
    status: Annotated[str | None, typer.Option(help="running or finished.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=500)] = 50,
    json: JsonOpt = False,
) -> None:
    """Graph runs, newest first."""
    with connect() as client:
        job_id = None if job is None else resolve(client, job).id
        page = client.list_graph_runs(job_id=job_id, status=status, limit=limit)
    if json:
        output.print_json(page)
        return
    rows = [
        (
            r.id,
            r.root_job_display_name or f"(deleted) {r.root_job_id}",
            r.status.value,
            output.when(r.created_at),
            output.when(r.finished_at),
        )
        for r in page.items
    ]
    columns = ["id", "root job", "status", "started (UTC)", "finished (UTC)"]
    output.show(output.table(None, columns, rows))


RunArg = Annotated[str, typer.Argument(help=f"The graph run: {refs.ID_HELP}.")]


@app.command("show")
def show(run: RunArg, json: JsonOpt = False) -> None:
    """A graph run: each job by level, its occurrence, status and reason."""
    with connect() as client:
        detail = client.get_graph_run(refs.match_id(client, "graph_run", run, "graph run"))
    if json:
        output.print_json(detail)
        return
    rows = [
        (n.level, n.name or n.job_id, n.occurrence_id or "", n.status_name, n.reason or "")
        for n in detail.nodes
    ]
    title = f"graph run {detail.id} ({detail.status.value})"
    output.show(output.table(title, ["level", "job", "occurrence", "status", "reason"], rows))
