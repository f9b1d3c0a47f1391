"""``rota users``: the users of a running server over the REST API (Admin): list, create,
change a role, reset a password, deactivate, activate, delete. ``rota user`` (singular) works
on a data dir's store directly instead, with no server (docs/cli.md#users)."""

from __future__ import annotations

import sys
from enum import StrEnum
from typing import Annotated, Any
from uuid import UUID

import typer

from rota.api.schemas.security import UserOut, UserPage
from rota.cli.ops import output
from rota.cli.ops.jobs import AllOpt, CursorOpt, LimitOpt, collect
from rota.cli.ops.output import JsonOpt
from rota.cli.ops.session import NOT_FOUND, USAGE, connect, fail, target
from rota.client import SyncClient

app = typer.Typer(
    help="Users of a running server (Admin, over HTTP): list, create, role, password, "
    "deactivate, activate, delete. `rota user` works on a data dir without a server."
)

PAGE = 1000


class RoleName(StrEnum):
    viewer = "viewer"
    operator = "operator"
    admin = "admin"


UserArg = Annotated[str, typer.Argument(help="The username (case-insensitive) or the user's id.")]
PasswordStdinOpt = Annotated[
    bool,
    typer.Option(
        "--password-stdin",
        help="Read the password from stdin's first line (your own: the current one from the "
        "second line) instead of asking.",
    ),
]


def _page(client: SyncClient, size: int, after: str | None) -> UserPage:
    params: dict[str, Any] = {"limit": size} | ({"cursor": after} if after else {})
    return UserPage.model_validate(
        client.call(client.client.request("GET", "/users", params=params))
    )


def find(client: SyncClient, name: str) -> UserOut:
    """The user of that id, or of that username; none: exit code 4."""
    try:
        user_id = UUID(name)
    except ValueError:
        wanted = name.strip().lower()
        cursor: str | None = None
        while True:
            page = _page(client, PAGE, cursor)
            for user in page.items:
                if user.username.lower() == wanted:
                    return user
            cursor = page.next_cursor
            if cursor is None:
                fail(f"no user named {name}", NOT_FOUND)
    return UserOut.model_validate(client.call(client.client.request("GET", f"/users/{user_id}")))


def _patch(client: SyncClient, user: UserOut, body: dict[str, Any]) -> UserOut:
    answer = client.call(client.client.request("PATCH", f"/users/{user.id}", json=body))
    return UserOut.model_validate(answer)


def _state(user: UserOut) -> str:
    if not user.is_active:
        return "inactive"
    if user.locked_until is not None:
        return f"locked until {output.when(user.locked_until)}"
    return "active"


def _done(user: UserOut, what: str, json: bool) -> None:
    if json:
        output.print_json(user)
        return
    output.err_print(
        f"[green]{what}[/green] {output.esc(user.username)} ({user.role.value}, {_state(user)})"
    )


def _read_secret(prompt: str, from_stdin: bool, *, confirm: bool) -> str:
    """A password from stdin's next line, or asked for (hidden; twice when ``confirm``)."""
    if from_stdin:
        line = sys.stdin.readline()
        if not line:
            fail(f"--password-stdin: no line for the {prompt.lower()}", USAGE)
        return line.rstrip("\r\n")
    value: str = typer.prompt(prompt, hide_input=True, confirmation_prompt=confirm)
    return value


@app.command("list")
def list_users(
    limit: LimitOpt = 50, cursor: CursorOpt = None, every: AllOpt = False, json: JsonOpt = False
) -> None:
    """The users, oldest first: role, state (active, inactive, locked) and when made."""
    with connect() as client:
        items, cursor = collect(
            lambda size, after: _page(client, size, after), limit, cursor, every
        )
    if json:
        output.print_json({"items": items, "nextCursor": cursor})
        return
    rows = [(u.username, u.role.value, _state(u), output.when(u.created_at), u.id) for u in items]
    output.show(output.table(None, ["username", "role", "state", "created (UTC)", "id"], rows))
    output.more(cursor)


@app.command("create")
def create(
    username: Annotated[str, typer.Argument(help="Letters, digits and _ . @ -.")],
    role: Annotated[
        RoleName, typer.Option(case_sensitive=False, help="What the user may do.")
    ] = RoleName.viewer,
    password_stdin: PasswordStdinOpt = False,
    json: JsonOpt = False,
) -> None:
    """Create a user; the password is asked for twice (hidden), or read with --password-stdin
    (12 characters at least, not the username, not a common one)."""
    password = _read_secret("Password", password_stdin, confirm=True)
    body = {"username": username, "password": password, "role": role.value}
    with connect() as client:
        user = UserOut.model_validate(
            client.call(client.client.request("POST", "/users", json=body))
        )
    _done(user, "created", json)
    if not json:
        print(user.id)


@app.command("role")
def role(
    user: UserArg,
    new_role: Annotated[
        RoleName,
        typer.Argument(case_sensitive=False, metavar="ROLE", help="viewer, operator or admin."),
    ],
    json: JsonOpt = False,
) -> None:
    """Change a user's role; its sessions end at once (it signs in again). The last active
    Admin cannot be demoted (exit code 1)."""
    with connect() as client:
        changed = _patch(client, find(client, user), {"role": new_role.value})
    _done(changed, "role set:", json)


@app.command("password")
def password(
    user: UserArg, password_stdin: PasswordStdinOpt = False, json: JsonOpt = False
) -> None:
    """Reset a user's password: it also unlocks the user and ends its sessions. Your own
    needs your current password too (asked for, or stdin's second line)."""
    where = target()
    with connect(where) as client:
        found = find(client, user)
        new = _read_secret("New password", password_stdin, confirm=True)
        body = {"password": new}
        own = where.username is not None and where.username.lower() == found.username.lower()
        if own:
            body["currentPassword"] = _read_secret(
                "Current password", password_stdin, confirm=False
            )
        changed = _patch(client, found, body)
    _done(changed, "password reset:", json)
    if own and not json:
        output.err_print("your sessions have ended: run `rota login` again")


def _set_active(user: str, active: bool, json: bool) -> None:
    with connect() as client:
        changed = _patch(client, find(client, user), {"isActive": active})
    _done(changed, "activated" if active else "deactivated", json)


@app.command("deactivate")
def deactivate(user: UserArg, json: JsonOpt = False) -> None:
    """Stop a user from signing in (its sessions end at once); kept with its history. The last
    active Admin cannot be (exit code 1)."""
    _set_active(user, False, json)


@app.command("activate")
def activate(user: UserArg, json: JsonOpt = False) -> None:
    """Let a deactivated user sign in again."""
    _set_active(user, True, json)


@app.command("delete")
def delete(
    user: UserArg,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
    json: JsonOpt = False,
) -> None:
    """Delete a user (asks first unless --yes). The last active Admin cannot be (exit
    code 1)."""
    with connect() as client:
        found = find(client, user)
        if not yes:
            typer.confirm(f"Delete the user {found.username} ({found.role.value})?", abort=True)
        client.call(client.client.request("DELETE", f"/users/{found.id}"))
    if json:
        output.print_json({"id": str(found.id), "deleted": True})
        return
    output.err_print(f"[green]deleted the user[/green] {output.esc(found.username)} {found.id}")
