"""``rota audit``: the audit log (Admin): who changed what, when, newest first
(``GET /api/v1/audit``)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, NamedTuple

import typer

from rota.cli.ops import output
from rota.cli.ops.jobs import AllOpt, CursorOpt, LimitOpt, collect
from rota.cli.ops.output import JsonOpt
from rota.cli.ops.session import USAGE, connect, fail

RELATIVE = re.compile(r"^(\d+)([smhdw])$")
UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
NAME_KEYS = ("name", "displayName", "username")
"""Where an entry's before/after names its resource when the server did not
(``resourceName``)."""
QUIET_KEYS = frozenset({"updatedAt", "updatedBy", "auditInfo", "version"})
"""Fields left out of the change column (they change with everything)."""
RECORD_KEYS = frozenset({"id", "createdAt", "createdBy"})
"""Fields left out of a created or deleted record (the other columns say them)."""


def parse_time(value: str | None, option: str) -> datetime | None:
    """``value`` as an aware time: ISO 8601 (naive: UTC), or a span back from now
    (``30m``, ``2h``, ``7d``, ``1w``); anything else ends the command with exit code 2."""
    if value is None:
        return None
    text = value.strip()
    relative = RELATIVE.match(text)
    try:
        if relative:
            amount, unit = int(relative.group(1)), UNITS[relative.group(2)]
            return datetime.now(UTC) - timedelta(**{unit: amount})
        parsed = datetime.fromisoformat(text)
    except (ValueError, OverflowError) as exc:
        fail(f"{option}: not an ISO time nor a span such as 2h or 7d ({exc})", USAGE)
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


class Page(NamedTuple):
    items: list[dict[str, Any]]
    """The entries as the API sends them (its JSON, printed as it is with ``--json``)."""
    next_cursor: str | None


def resource(entry: dict[str, Any]) -> str:
    """The resource's type and its name when known (else its id)."""
    kind = str(entry.get("resourceType") or "")
    name = entry.get("resourceName")
    for side in (entry.get("after"), entry.get("before")):
        if not name and isinstance(side, dict):
            name = next((side[k] for k in NAME_KEYS if isinstance(side.get(k), str)), None)
    return f"{kind} {name or entry.get('resourceId') or ''}".strip()


def _flat(value: dict[str, Any]) -> dict[str, Any]:
    """The fields of a record, a nested record's as ``outer.inner``."""
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key in QUIET_KEYS:
            continue
        if isinstance(item, dict) and item:
            out |= {f"{key}.{k}": v for k, v in item.items() if k not in QUIET_KEYS}
        else:
            out[key] = item
    return out


def _value(value: Any) -> str:
    return '""' if value == "" else output.compact(value, 40)


def change(entry: dict[str, Any], limit: int = 120) -> str:
    """What changed, on one line: ``field: old → new`` for an update, the record made or
    removed otherwise."""
    before, after = entry.get("before"), entry.get("after")
    if isinstance(before, dict) and isinstance(after, dict):
        old, new = _flat(before), _flat(after)
        keys = [k for k in new if old.get(k) != new[k]] + [k for k in old if k not in new]
        parts = [f"{k}: {_value(old.get(k))} → {_value(new.get(k))}" for k in keys]
        return output.compact("; ".join(parts), limit) if parts else "-"
    side = after if after is not None else before
    if not isinstance(side, dict):
        return "-" if side is None else output.compact(side, limit)
    fields = _flat({k: v for k, v in side.items() if k not in RECORD_KEYS})
    parts = [f"{k}={_value(v)}" for k, v in fields.items() if v not in (None, [], {}, "")]
    return output.compact(", ".join(parts), limit) if parts else "-"


def audit(
    actor: Annotated[str | None, typer.Option(help="Only this user's entries.")] = None,
    action: Annotated[
        str | None,
        typer.Option(help="Only this action, e.g. job.updated, user.created, login.failed."),
    ] = None,
    resource_type: Annotated[
        str | None,
        typer.Option("--resource-type", help="Only this kind: job, user, notification, …"),
    ] = None,
    resource_id: Annotated[
        str | None, typer.Option("--resource-id", help="Only the entries of this resource.")
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(help="From this time on: ISO 8601 (naive: UTC), or back from now: 2h, 7d."),
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Before this time (the same forms as --since).")
    ] = None,
    limit: LimitOpt = 50,
    cursor: CursorOpt = None,
    every: AllOpt = False,
    json: JsonOpt = False,
) -> None:
    """The audit log (Admin): every change, who made it and when, newest first."""
    params: dict[str, Any] = {
        "actor": actor,
        "action": action,
        "resourceType": resource_type,
        "resourceId": resource_id,
        "after": parse_time(since, "--since"),
        "before": parse_time(until, "--until"),
    }
    params = {k: v.isoformat() if isinstance(v, datetime) else v for k, v in params.items() if v}
    with connect() as client:

        def fetch(size: int, after: str | None) -> Page:
            query = params | {"limit": size} | ({"cursor": after} if after else {})
            answer = client.call(client.client.request("GET", "/audit", params=query))
            return Page(list(answer["items"]), answer.get("nextCursor"))

        items, cursor = collect(fetch, limit, cursor, every)
    if json:
        output.print_json({"items": items, "nextCursor": cursor})
        return
    rows = [
        (
            output.when(datetime.fromisoformat(e["at"])),
            e.get("actor"),
            e.get("action"),
            resource(e),
            change(e),
            e.get("resourceId"),
        )
        for e in items
    ]
    columns = ["time (UTC)", "actor", "action", "resource", "change", "resource id"]
    output.show(output.table(None, columns, rows))
    if not rows:
        output.err_print("no entry matches")
    output.more(cursor)
