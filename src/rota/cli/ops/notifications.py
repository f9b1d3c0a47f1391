"""``rota notifications``: notification subscriptions (Admin) over the REST API: list, show,
create, enable, disable, test, deliveries, delete (``/api/v1/notifications/subscriptions``;
docs/notifications.md)."""

from __future__ import annotations

import sys
from enum import StrEnum
from typing import Annotated, Any
from uuid import UUID

import typer

from rota.api.schemas.notifications import DeliveryLog, SubscriptionList, SubscriptionOut
from rota.cli.ops import output
from rota.cli.ops.jobs import resolve
from rota.cli.ops.output import JsonOpt
from rota.cli.ops.session import API_ERROR, NOT_FOUND, USAGE, connect, fail
from rota.client import SyncClient

app = typer.Typer(
    help="Notification subscriptions (Admin): list, show, create, enable, disable, test, "
    "deliveries, delete."
)

PATH = "/notifications/subscriptions"


class Event(StrEnum):
    failed = "occurrence.failed"
    timed_out = "occurrence.timed_out"
    auto_disabled = "job.auto_disabled"
    deadletters = "deadletters.over_threshold"
    silence = "silence.alert"


SubscriptionArg = Annotated[
    str, typer.Argument(help="The subscription's id or its name (rota notifications list).")
]


def _list(client: SyncClient) -> list[SubscriptionOut]:
    return SubscriptionList.model_validate(client.call(client.client.request("GET", PATH))).items


def find(client: SyncClient, name: str) -> SubscriptionOut:
    """The subscription of that id, or the one of that name (exit code 4 for none, 1 when
    several have it)."""
    try:
        sub_id = UUID(name)
    except ValueError:
        named = [s for s in _list(client) if s.name == name]
        if not named:
            fail(f"no notification subscription named {name}", NOT_FOUND)
        if len(named) > 1:
            ids = ", ".join(str(s.id) for s in named)
            fail(f"{len(named)} subscriptions are named {name}: give the id ({ids})", API_ERROR)
        return named[0]
    answer = client.call(client.client.request("GET", f"{PATH}/{sub_id}"))
    return SubscriptionOut.model_validate(answer)


def _target(sub: SubscriptionOut) -> str:
    return sub.url or ", ".join(sub.recipients) or "-"


def _scope(sub: SubscriptionOut) -> str:
    if sub.job_id is not None:
        return f"job {sub.job_id}"
    if sub.tag is not None:
        return f"tag {sub.tag}"
    return "every job"


def _events(sub: SubscriptionOut) -> str:
    return ", ".join(e.value for e in sub.events)


@app.command("list")
def list_subscriptions(json: JsonOpt = False) -> None:
    """Every subscription: channel, where it sends, its events and scope, whether enabled."""
    with connect() as client:
        subs = _list(client)
    if json:
        output.print_json({"items": subs})
        return
    rows = [
        (
            s.name,
            s.channel.value,
            _target(s),
            _events(s),
            _scope(s),
            "yes" if s.enabled else "no",
            s.id,
        )
        for s in subs
    ]
    columns = ["name", "channel", "sends to", "events", "scope", "enabled", "id"]
    output.show(output.table(None, columns, rows))
    if not rows:
        output.err_print("no subscription: rota notifications create …")


def _show(sub: SubscriptionOut) -> None:
    pairs: list[tuple[str, Any]] = [
        ("id", sub.id),
        ("name", sub.name),
        ("channel", sub.channel.value),
        ("sends to", _target(sub)),
        ("signed", ("yes (secret kept)" if sub.has_secret else "no") if sub.url else None),
        ("events", _events(sub)),
        ("scope", _scope(sub)),
        ("threshold", sub.threshold if "deadletters" in _events(sub) else None),
        ("enabled", "yes" if sub.enabled else "no"),
        ("created (UTC)", f"{output.when(sub.created_at)} by {sub.created_by or '-'}"),
        ("changed (UTC)", output.when(sub.updated_at)),
    ]
    output.show(output.fields(f"subscription {sub.name}", pairs))


@app.command("show")
def show(subscription: SubscriptionArg, json: JsonOpt = False) -> None:
    """One subscription."""
    with connect() as client:
        sub = find(client, subscription)
    if json:
        output.print_json(sub)
        return
    _show(sub)


def _read_secret() -> str:
    line = sys.stdin.readline()
    if not line.strip():
        fail("--secret-stdin: no secret on stdin's first line", USAGE)
    return line.strip()


@app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="A name to know it by.")],
    event: Annotated[
        list[Event],
        typer.Option("--event", "-e", help="An event to be told of (repeatable)."),
    ],
    webhook: Annotated[
        str | None, typer.Option(help="Send to this http(s) URL (POST, signed).")
    ] = None,
    email: Annotated[
        list[str] | None, typer.Option(help="Send email to this address (repeatable).")
    ] = None,
    secret_stdin: Annotated[
        bool,
        typer.Option(
            "--secret-stdin",
            help="webhook: read the signing secret (16+ characters) from stdin's first line; "
            "without it one is generated and printed once.",
        ),
    ] = False,
    job: Annotated[
        str | None, typer.Option(help="Only this job's events (its id or name).")
    ] = None,
    tag: Annotated[str | None, typer.Option(help="Only the events of jobs with this tag.")] = None,
    threshold: Annotated[
        int,
        typer.Option(min=0, help="deadletters.over_threshold: told above this many open ones."),
    ] = 0,
    disabled: Annotated[bool, typer.Option("--disabled", help="Create it switched off.")] = False,
    json: JsonOpt = False,
) -> None:
    """Create a subscription: a webhook (--webhook URL) or email (--email ADDRESS…). A webhook
    without --secret-stdin gets a generated secret, printed once on stderr."""
    if (webhook is None) == (not email):
        fail("give --webhook URL or --email ADDRESS, one of them", USAGE)
    if secret_stdin and webhook is None:
        fail("--secret-stdin is for a webhook", USAGE)
    if job is not None and tag is not None:
        fail("give --job or --tag, not both", USAGE)
    body: dict[str, Any] = {
        "name": name,
        "events": [e.value for e in event],
        "channel": "webhook" if webhook is not None else "email",
        "threshold": threshold,
        "enabled": not disabled,
    }
    if webhook is not None:
        body["url"] = webhook
        if secret_stdin:
            body["secret"] = _read_secret()
    else:
        body["recipients"] = list(email or ())
    if tag is not None:
        body["tag"] = tag
    with connect() as client:
        if job is not None:
            body["jobId"] = str(resolve(client, job).id)
        answer = client.call(client.client.request("POST", PATH, json=body))
    if json:
        output.print_json(answer)
        return
    sub = SubscriptionOut.model_validate(answer)
    output.err_print(f"[green]created the subscription[/green] {output.esc(sub.name)} {sub.id}")
    if sub.secret:
        output.err_print(
            "its signing secret (X-Rota-Signature), shown this once: keep it for the receiver:\n"
            + output.esc(sub.secret)
        )
    print(sub.id)


def _set_enabled(subscription: str, enabled: bool, json: bool) -> None:
    with connect() as client:
        found = find(client, subscription)
        answer = client.call(
            client.client.request("PATCH", f"{PATH}/{found.id}", json={"enabled": enabled})
        )
    if json:
        output.print_json(answer)
        return
    sub = SubscriptionOut.model_validate(answer)
    word = "enabled" if enabled else "disabled"
    output.err_print(f"[green]{word} the subscription[/green] {output.esc(sub.name)} {sub.id}")


@app.command("enable")
def enable(subscription: SubscriptionArg, json: JsonOpt = False) -> None:
    """Switch a subscription on: its events are sent again."""
    _set_enabled(subscription, True, json)


@app.command("disable")
def disable(subscription: SubscriptionArg, json: JsonOpt = False) -> None:
    """Switch a subscription off: nothing is sent until it is enabled."""
    _set_enabled(subscription, False, json)


@app.command("test")
def send_test(subscription: SubscriptionArg, json: JsonOpt = False) -> None:
    """Queue a test delivery (sent like any other, marked as a test); see how it went with
    `rota notifications deliveries`."""
    with connect() as client:
        found = find(client, subscription)
        delivery = client.call(client.client.request("POST", f"{PATH}/{found.id}/test"))
    if json:
        output.print_json(delivery)
        return
    output.err_print(
        f"[green]test queued[/green] for {output.esc(found.name)}: delivery {delivery['id']} "
        f"({delivery['state']}); `rota notifications deliveries {found.id}` shows how it went"
    )
    print(delivery["id"])


@app.command("deliveries")
def deliveries(
    subscription: SubscriptionArg,
    limit: Annotated[int, typer.Option(min=1, max=100, help="The newest this many.")] = 20,
    json: JsonOpt = False,
) -> None:
    """The delivery log: the newest deliveries and their attempts (the error of a failed one)."""
    with connect() as client:
        found = find(client, subscription)
        answer = client.call(
            client.client.request("GET", f"{PATH}/{found.id}/deliveries", params={"limit": limit})
        )
    if json:
        output.print_json(answer)
        return
    log = DeliveryLog.model_validate(answer)
    rows = [
        (
            output.when(d.created_at),
            d.event.value,
            "test" if d.key.startswith("test:") else d.key,
            d.state,
            d.attempts,
            output.when(d.finished_at if d.finished_at else d.next_attempt_at),
            output.compact(d.last_error, 80),
            d.id,
        )
        for d in log.deliveries
    ]
    columns = ["queued (UTC)", "event", "key", "state", "tries", "done/next (UTC)", "error", "id"]
    output.show(output.table(f"deliveries of {found.name}", columns, rows))


@app.command("delete")
def delete(
    subscription: SubscriptionArg,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
    json: JsonOpt = False,
) -> None:
    """Delete a subscription with its delivery log (asks first unless --yes)."""
    with connect() as client:
        found = find(client, subscription)
        if not yes:
            typer.confirm(f"Delete the subscription {found.name} ({found.id})?", abort=True)
        client.call(client.client.request("DELETE", f"{PATH}/{found.id}"))
    if json:
        output.print_json({"id": str(found.id), "deleted": True})
        return
    output.err_print(f"[green]deleted the subscription[/green] {output.esc(found.name)} {found.id}")
