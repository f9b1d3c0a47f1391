"""``rota keys``: API keys for services (Admin, over the REST API): list, create (the key is
printed once), revoke. docs/security.md#api-keys."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

import typer

from rota.api.schemas.apikeys import ApiKeyOut
from rota.cli.ops import output
from rota.cli.ops.output import JsonOpt
from rota.cli.ops.session import USAGE, connect, fail

app = typer.Typer(help="API keys for services (Admin): list, create, revoke.")


def _state(key: ApiKeyOut) -> str:
    if key.revoked_at is not None:
        return "revoked"
    if key.expires_at is not None and key.expires_at <= datetime.now(UTC):
        return "expired"
    return "active"


def _scope(key: ApiKeyOut) -> str:
    parts = []
    if key.job_types:
        parts.append("types: " + ", ".join(key.job_types))
    if key.tags:
        parts.append("tags: " + ", ".join(key.tags))
    return "; ".join(parts) or "-"


@app.command("list")
def list_keys(json: JsonOpt = False) -> None:
    """List the API keys (revoked ones too), newest first."""
    with connect() as client:
        keys = client.list_api_keys()
    if json:
        output.print_json(keys)
        return
    rows = [
        (
            k.id,
            k.name,
            k.role.value,
            _scope(k),
            _state(k),
            output.when(k.expires_at),
            output.when(k.last_used_at),
        )
        for k in keys
    ]
    columns = ["id", "name", "role", "scope", "state", "expires (UTC)", "last used (UTC)"]
    output.show(output.table(None, columns, rows))


@app.command("create")
def create_key(
    name: Annotated[str, typer.Argument(help="Letters, digits and _ . @ -.")],
    role: Annotated[str, typer.Option("--role", help="viewer, operator or admin.")] = "viewer",
    job_type: Annotated[
        list[str] | None,
        typer.Option("--job-type", help="Scope: only jobs of this type (repeatable)."),
    ] = None,
    tag: Annotated[
        list[str] | None,
        typer.Option("--tag", help="Scope: only jobs with one of these tags (repeatable)."),
    ] = None,
    expires_in_days: Annotated[
        float | None,
        typer.Option("--expires-in-days", min=0.001, help="The key stops working after this."),
    ] = None,
    json: JsonOpt = False,
) -> None:
    """Create an API key and print it, once: it is never shown again."""
    expires_at = None
    if expires_in_days is not None:
        try:
            expires_at = datetime.now(UTC) + timedelta(days=expires_in_days)
        except OverflowError:
            fail("--expires-in-days is too far away", USAGE)
    with connect() as client:
        created = client.create_api_key(
            name, role, job_types=job_type, tags=tag, expires_at=expires_at
        )
    if json:
        output.print_json(created)
        return
    output.err_print(
        f"created the API key {output.esc(created.name)} ({created.role.value}, scope "
        f"{output.esc(_scope(created))}); it is shown this once:"
    )
    print(created.key)


@app.command("revoke")
def revoke_key(
    key_id: Annotated[str, typer.Argument(help="The key's id (rota keys list).")],
    json: JsonOpt = False,
) -> None:
    """Revoke an API key: requests made with it are refused from now on."""
    with connect() as client:
        key = client.revoke_api_key(key_id)
    if json:
        output.print_json(key)
        return
    output.err_print(f"revoked the API key {output.esc(key.name)} ({key.id})")
