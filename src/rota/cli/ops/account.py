"""``rota login``, ``rota logout`` and ``rota whoami``."""

from __future__ import annotations

import os
import sys
from typing import Annotated, Any

import typer

from rota.cli.ops import output, session
from rota.cli.ops.output import JsonOpt
from rota.cli.ops.session import Login, bare_client, connect, guarded
from rota.client import SyncClient

DEFAULT_URL = "http://127.0.0.1:8000"


def login(
    url: Annotated[
        str | None, typer.Option(help="The server (default: ROTA_URL, else asked).")
    ] = None,
    user: Annotated[str | None, typer.Option("--user", "-u", help="The username.")] = None,
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="Read the password from stdin's first line.")
    ] = False,
    api_key: Annotated[
        bool,
        typer.Option(
            "--api-key",
            help="Keep an API key instead (asked for, or stdin's first line with "
            "--password-stdin); no username or password.",
        ),
    ] = False,
) -> None:
    """Sign in to a Rota server and keep the tokens for the other commands (0600 file)."""
    url = url or os.environ.get("ROTA_URL") or typer.prompt("Server URL", default=DEFAULT_URL)
    url = session.normalise_url(url)
    if api_key:
        _login_with_key(url, password_stdin)
        return
    user = user or typer.prompt("Username")
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = typer.prompt("Password", hide_input=True)
    with guarded("check the username and password"), bare_client(url) as client:
        credentials = {"username": user, "password": password}
        tokens: dict[str, Any] = client.call(
            client.client.request("POST", "/auth/login", json=credentials)
        )
    with guarded(), SyncClient(url, token=str(tokens["accessToken"])) as client:
        me: dict[str, Any] = client.call(client.client.request("GET", "/auth/me"))
    signed = Login.from_tokens(url, str(me.get("username", user)), tokens)
    session.save(signed)
    output.err_print(
        f"[green]signed in[/green] to {output.esc(url)} as {output.esc(signed.username)} "
        f"({me.get('role', '?')}); tokens kept in {output.esc(session.credentials_path())}"
    )


def _login_with_key(url: str, from_stdin: bool) -> None:
    """Check the key against the server (one read) and keep it like a login."""
    if from_stdin:
        key = sys.stdin.readline().strip()
    else:
        key = typer.prompt("API key", hide_input=True).strip()
    if not session.is_api_key(key):
        session.fail("an API key starts with rota_ (rota keys create prints one)", session.USAGE)
    with guarded("check the API key"), SyncClient(url, api_key=key) as client:
        client.call(client.client.request("GET", "/jobs", params={"limit": "1"}))
    kept = Login(url, session.API_KEY_USER, key, None, session.KEY_EXPIRES_AT)
    session.save(kept)
    output.err_print(
        f"[green]API key kept[/green] for {output.esc(url)} "
        f"({output.esc(key[:37])}…) in {output.esc(session.credentials_path())}"
    )


def logout(
    url: Annotated[
        str | None, typer.Option(help="The server (default: the one signed in to last).")
    ] = None,
) -> None:
    """Sign out: end the login on the server and forget its tokens here."""
    url = url or os.environ.get("ROTA_URL") or None
    login_ = session.stored(session.normalise_url(url) if url else None)
    if login_ is None:
        output.err_print("not signed in")
        return
    try:
        if session.is_api_key(login_.access_token):  # nothing to end on the server
            raise _KeptKey
        with SyncClient(login_.url, token=login_.access_token, timeout=10) as client:
            body = {"refreshToken": login_.refresh_token} if login_.refresh_token else {}
            client.call(client.client.request("POST", "/auth/logout", json=body))
    except _KeptKey:
        pass
    except Exception as exc:  # the server gone or the token expired: forget it all the same
        output.err_print(f"[yellow]the server did not end the login[/yellow] ({output.esc(exc)})")
    session.forget(login_.url)
    output.err_print(f"signed out of {output.esc(login_.url)}")


class _KeptKey(Exception):
    """A kept API key: logging out only forgets it here (revoke it with `rota keys revoke`)."""


def whoami(json: JsonOpt = False) -> None:
    """The server and the user (or API key) the commands act as."""
    where = session.target()
    if session.is_api_key(where.token):
        with connect(where) as client:  # a key is no user: check it with one read
            client.call(client.client.request("GET", "/jobs", params={"limit": "1"}))
        key = {"apiKey": where.token[:37] + "…", "url": where.url}
        if json:
            output.print_json(key)
            return
        print(f"API key {key['apiKey']} on {where.url}")
        return
    with connect(where) as client:
        me = client.call(client.client.request("GET", "/auth/me"))
    url = where.url
    if json:
        output.print_json({"url": url, **me})
        return
    print(f"{me['username']} ({me['role']}) on {url}")
