"""Where the operator's commands find their server and token, and how every failure ends a
command with a documented exit code (docs/cli.md, "Exit codes").

The server and token come from ``ROTA_URL`` / ``ROTA_API_KEY`` (an API key) /
``ROTA_TOKEN`` when set, else from the credentials file ``rota login`` writes
(``$XDG_CONFIG_HOME/rota/credentials.json``, mode 0600): per server, the username, the access
token, its expiry and the refresh token (or a kept API key). An access token lives 15 minutes
at most; a command that finds it (nearly) expired renews it with the refresh token first
(``POST /auth/refresh``) and saves the new pair, under a file lock so
two commands never present the same single-use refresh token.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import httpx
import orjson
import typer
from rich.console import Console
from rich.markup import escape

from rota.client import (
    ApiAuthError,
    ApiError,
    ApiNotFoundError,
    ApiUnavailableError,
    SyncClient,
)

OK, API_ERROR, USAGE, AUTH, NOT_FOUND, UNREACHABLE = 0, 1, 2, 3, 4, 5
"""The exit codes (docs/cli.md)."""

RENEW_BEFORE = 60.0
KEY_EXPIRES_AT = 253402300799.0
"""The saved expiry of an API key's login (9999-12-31): the server decides when it ends."""
API_KEY_USER = "(API key)"
"""Seconds before its expiry an access token is renewed."""
TIMEOUT = 30.0


def err_console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def fail(message: str, code: int) -> NoReturn:
    """End the command: ``message`` on stderr, exit code ``code``."""
    err_console().print(f"[red]error:[/red] {escape(message)}")
    raise typer.Exit(code)


def config_dir() -> Path:
    """``$XDG_CONFIG_HOME/rota`` (``~/.config/rota``; the platform's equivalent elsewhere)."""
    return Path(typer.get_app_dir("rota"))


def credentials_path() -> Path:
    return config_dir() / "credentials.json"


@dataclass
class Login:
    """One server's entry in the credentials file."""

    url: str
    username: str
    access_token: str
    refresh_token: str | None
    expires_at: float
    """Epoch seconds (this machine's clock at sign-in plus the token's lifetime)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "username": self.username,
            "accessToken": self.access_token,
            "refreshToken": self.refresh_token,
            "expiresAt": self.expires_at,
        }

    @classmethod
    def from_tokens(cls, url: str, username: str, tokens: dict[str, Any]) -> Login:
        return cls(
            url=url,
            username=username,
            access_token=str(tokens["accessToken"]),
            refresh_token=tokens.get("refreshToken"),
            expires_at=time.time() + float(tokens.get("expiresIn", 900)),
        )


def normalise_url(url: str) -> str:
    url = url.strip().rstrip("/")
    if url.endswith("/api/v1"):
        url = url[: -len("/api/v1")]
    if not url.startswith(("http://", "https://")):
        url = "http://" + url
    return url


# --- the credentials file --------------------------------------------------------------------


def _read_file() -> dict[str, Any]:
    path = credentials_path()
    try:
        data = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return {"current": None, "servers": {}}
    except (OSError, orjson.JSONDecodeError) as exc:
        fail(f"cannot read {path}: {exc}; run `rota login` again", AUTH)
    if not isinstance(data, dict) or not isinstance(data.get("servers"), dict):
        return {"current": None, "servers": {}}
    return data


def _write_file(data: dict[str, Any]) -> None:
    """Replace the file atomically, readable by its owner only (0600, its directory 0700)."""
    path = credentials_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, orjson.dumps(data, option=orjson.OPT_INDENT_2))
    finally:
        os.close(fd)
    os.replace(temporary, path)


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """An exclusive lock on the credentials (a sibling lock file), for read-change-write."""
    lock = credentials_path().with_suffix(".lock")
    lock.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def stored(url: str | None = None) -> Login | None:
    """The saved login for ``url`` (default: the server signed in to last)."""
    data = _read_file()
    url = url or data.get("current")
    entry = data["servers"].get(url) if url else None
    if not isinstance(entry, dict) or "accessToken" not in entry:
        return None
    return Login(
        url=str(url),
        username=str(entry.get("username", "")),
        access_token=str(entry["accessToken"]),
        refresh_token=entry.get("refreshToken"),
        expires_at=float(entry.get("expiresAt", 0)),
    )


def save(login: Login) -> None:
    with _locked():
        data = _read_file()
        data["servers"][login.url] = login.to_json()
        data["current"] = login.url
        _write_file(data)


def forget(url: str) -> bool:
    """Drop the saved login of ``url``; whether there was one."""
    with _locked():
        data = _read_file()
        had = data["servers"].pop(url, None) is not None
        if data.get("current") == url:
            data["current"] = next(iter(data["servers"]), None)
        _write_file(data)
    return had


# --- which server, which token ---------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    url: str
    token: str
    username: str | None
    """``None`` when the token came from ``ROTA_TOKEN``."""


def _renewed(login: Login) -> Login:
    """``login`` with a fresh access token when its own is (nearly) expired."""
    if login.expires_at - RENEW_BEFORE > time.time():
        return login
    with _locked():
        current = stored(login.url)  # another command may have renewed it meanwhile
        if current is not None and current.expires_at - RENEW_BEFORE > time.time():
            return current
        if current is None or not current.refresh_token:
            fail(f"the sign-in to {login.url} has expired: run `rota login`", AUTH)
        with guarded(), bare_client(login.url) as client:
            try:
                tokens = client.call(
                    client.client.request(
                        "POST", "/auth/refresh", json={"refreshToken": current.refresh_token}
                    )
                )
            except ApiAuthError:
                fail(f"the sign-in to {login.url} has expired: run `rota login`", AUTH)
        fresh = Login.from_tokens(login.url, current.username, tokens)
        data = _read_file()
        data["servers"][login.url] = fresh.to_json()
        _write_file(data)
        return fresh


def is_api_key(token: str) -> bool:
    return token.startswith("rota_")


def target() -> Target:
    """The server and token to use: ``ROTA_URL`` / ``ROTA_API_KEY`` / ``ROTA_TOKEN`` win over
    the saved login (an API key over a token)."""
    env_url = os.environ.get("ROTA_URL") or None
    env_token = os.environ.get("ROTA_API_KEY") or os.environ.get("ROTA_TOKEN") or None
    url = normalise_url(env_url) if env_url else None
    if env_token:
        login = stored()
        if url is None:
            url = login.url if login is not None else None
        if url is None:
            fail("ROTA_API_KEY or ROTA_TOKEN is set but no server: set ROTA_URL too", AUTH)
        return Target(url, env_token, None)
    login = stored(url)
    if login is None:
        where = f" to {url}" if url else ""
        fail(f"not signed in{where}: run `rota login` (or set ROTA_URL and ROTA_TOKEN)", AUTH)
    login = _renewed(login)
    return Target(login.url, login.access_token, login.username)


def quiet_target() -> Target | None:
    """:func:`target` for shell completion: nothing printed, nothing renewed (``None`` when
    there is no usable token)."""
    env_url = os.environ.get("ROTA_URL") or None
    env_token = os.environ.get("ROTA_API_KEY") or os.environ.get("ROTA_TOKEN") or None
    url = normalise_url(env_url) if env_url else None
    try:
        login = stored(url)
    except (typer.Exit, OSError):
        return None
    if env_token:
        base = url or (login.url if login is not None else None)
        return None if base is None else Target(base, env_token, None)
    if login is None or login.expires_at <= time.time():
        return None
    return Target(login.url, login.access_token, login.username)


def bare_client(url: str) -> SyncClient:
    """A client without a token (signing in, renewing)."""
    return SyncClient(url, timeout=TIMEOUT)


@contextlib.contextmanager
def connect(where: Target | None = None) -> Iterator[SyncClient]:
    """A client of the target server (default: :func:`target`), signed in; any failure inside
    ends the command with its exit code."""
    where = where or target()
    hint = "run `rota login`" if where.username is not None else "check ROTA_API_KEY/ROTA_TOKEN"
    with guarded(hint), SyncClient(where.url, token=where.token, timeout=TIMEOUT) as client:
        yield client


def problem_message(exc: ApiError) -> str:
    """The problem details as a message: each field at fault with what is wrong with it, and
    the detail when it says more than those."""
    text = exc.detail or str(exc.problem.get("title") or f"HTTP {exc.status}")
    lines: list[str] = []
    for error in exc.errors:
        field = error.get("field")
        message = str(error.get("message") or "")
        lines.append(f"{field}: {message}" if field else message)
    if not lines or all(text not in line for line in lines):
        lines.insert(0, text)
    return "\n".join(lines)


@contextlib.contextmanager
def guarded(hint: str = "run `rota login`") -> Iterator[None]:
    """Turn the client's errors into messages and exit codes (``hint``: what to do about a
    401)."""
    try:
        yield
    except ApiAuthError as exc:
        if exc.status == 403:
            fail(f"not allowed: {problem_message(exc)}", AUTH)
        fail(f"not signed in ({problem_message(exc)}): {hint}", AUTH)
    except ApiNotFoundError as exc:
        fail(problem_message(exc), NOT_FOUND)
    except ApiUnavailableError as exc:
        fail(f"the server is unavailable: {problem_message(exc)}", UNREACHABLE)
    except ApiError as exc:
        if exc.status >= 500:
            fail(f"server error {exc.status}: {problem_message(exc)}", UNREACHABLE)
        fail(problem_message(exc), API_ERROR)
    except httpx.TransportError as exc:
        fail(f"cannot reach the server: {exc.__class__.__name__}: {exc}", UNREACHABLE)
