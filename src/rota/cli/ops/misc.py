"""``rota workers`` and ``rota cron preview``."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import typer

from rota.cli.ops import output
from rota.cli.ops.output import JsonOpt
from rota.cli.ops.session import connect

cron_app = typer.Typer(help="Cron expressions: preview the next fires.")


def workers(json: JsonOpt = False) -> None:
    """The live worker groups: their instances, load and job types."""
    with connect() as client:
        groups = client.workers()
    if json:
        output.print_json(groups)
        return
    rows = [
        (
            group.worker_id,
            instance.instance_id,
            instance.host,
            instance.version,
            f"{instance.current_load}/{instance.concurrency}",
            output.when(instance.last_heartbeat),
            ", ".join(instance.job_types),
        )
        for group in groups.items
        for instance in group.instances
    ]
    columns = ["group", "instance", "host", "version", "load", "heartbeat (UTC)", "job types"]
    output.show(output.table(None, columns, rows))
    if not rows:
        output.err_print("no live worker")


@cron_app.command("preview")
def preview(
    expression: Annotated[
        str | None, typer.Argument(help='The cron expression, e.g. "0 6 * * 1-5".')
    ] = None,
    tz: Annotated[str, typer.Option("--tz", help="IANA time zone it runs in.")] = "UTC",
    count: Annotated[int, typer.Option(min=1, max=1000, help="How many fires.")] = 5,
    start: Annotated[
        str | None,
        typer.Option("--from", help="The fires after this ISO time (naive: UTC). Default: now."),
    ] = None,
    every: Annotated[
        str | None,
        typer.Option("--every", help="An interval instead (90m, 1h30m), aligned to --from."),
    ] = None,
    json: JsonOpt = False,
) -> None:
    """The next fire times of a cron expression, or of an interval with --every (asks the
    server, which checks it)."""
    if (expression is None) == (every is None):
        raise typer.BadParameter("give a cron expression or --every, one of them")
    params: dict[str, Any] = {"timeZone": tz, "count": count}
    params |= {"cron": expression} if every is None else {"every": every}
    if start is not None:
        params["after"] = start
    with connect() as client:
        answer = client.call(client.client.request("GET", "/schedules/preview", params=params))
    fires = [datetime.fromisoformat(str(fire)) for fire in answer["fires"]]
    if json:
        output.print_json({"fires": [fire.isoformat() for fire in fires]})
        return
    rows = [(output.when(fire), fire.astimezone(_zone(tz)).isoformat()) for fire in fires]
    output.show(output.table(None, ["UTC", tz], rows))


def _zone(name: str) -> Any:
    from zoneinfo import ZoneInfo

    return ZoneInfo(name)
