"""``rota dispatch status|stop|resume``: the dispatchers' stop switch of every server (an
Operator or Admin stops and resumes; anyone signed in reads it)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from rota.cli.ops import output
from rota.cli.ops.output import JsonOpt
from rota.cli.ops.session import connect

app = typer.Typer(help="Stop, resume and read dispatching on every server.")

PATH = "/admin/dispatcher"


def _show(state: dict[str, Any], json: bool) -> None:
    if json:
        output.print_json(state)
        return
    pairs = [
        ("state", "stopped" if state.get("paused") else "dispatching"),
        ("reason", state.get("reason") or "-"),
        ("by", state.get("by") or "-"),
        ("since (UTC)", state.get("changedAt") or "-"),
    ]
    output.show(output.fields("dispatching", pairs))


@app.command("status")
def status(json: JsonOpt = False) -> None:
    """Whether dispatching is stopped, by whom, since when and why (exit code 0 either way)."""
    with connect() as client:
        state = client.call(client.client.request("GET", PATH))
    _show(state, json)


@app.command("stop")
def stop(
    reason: Annotated[str, typer.Option(help="Why (shown to everyone on every dashboard page).")],
    json: JsonOpt = False,
) -> None:
    """Stop dispatching on every server: no fire is sent until it is resumed (what the
    workers hold already still runs; missed fires follow each job's misfire policy)."""
    with connect() as client:
        state = client.call(client.client.request("POST", f"{PATH}/stop", json={"reason": reason}))
    _show(state, json)


@app.command("resume")
def resume(
    reason: Annotated[str | None, typer.Option(help="Why (kept in the audit log).")] = None,
    json: JsonOpt = False,
) -> None:
    """Resume dispatching on every server."""
    body = {} if reason is None else {"reason": reason}
    with connect() as client:
        state = client.call(client.client.request("POST", f"{PATH}/resume", json=body))
    _show(state, json)
