"""The Admin's CLI commands over HTTP (``rota audit``, ``rota notifications``, ``rota users``)
against one real ``rota dev`` server for the module: what they print, what they change on the
server, and the exit codes of refusals (docs/cli.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from .cli import Cli
from .conftest import ADMIN_USER, HERE, RotaProcess

pytestmark = pytest.mark.slow

OK, API_ERROR, USAGE, AUTH, NOT_FOUND = 0, 1, 2, 3, 4
FAR = "0 0 1 1 *"
HOOK = "https://hooks.example.com/rota"
"""A receiver that is never reached (its deliveries fail and are retried): enough to test
what is kept and queued."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RotaProcess]:
    root = tmp_path_factory.mktemp("cli-admin-server")
    (root / "logs").mkdir()
    proc = RotaProcess(root / "data", root / "logs", jobs=HERE / "cli_jobs.py")
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def cli(server: RotaProcess, tmp_path_factory: pytest.TempPathFactory) -> Cli:
    """Signed in as the admin (once for the module)."""
    made = Cli(server.base, tmp_path_factory.mktemp("cli-admin-config"))
    made.login()
    return made


def signed_in(server: RotaProcess, path: Path, user: str, password: str) -> Cli:
    other = Cli(server.base, path)
    other.ok("login", "--url", server.base, "-u", user, "--password-stdin", input=password + "\n")
    return other


def items(cli: Cli, *args: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = cli.json(*args)["items"]
    return found


# --- rota users --------------------------------------------------------------------------------


def test_users_over_http_from_create_to_delete(
    cli: Cli, server: RotaProcess, tmp_path: Path
) -> None:
    # The only active Admin cannot be demoted: 409, exit 1, nothing changed.
    refused = cli.run("users", "role", ADMIN_USER, "viewer")
    assert refused.exit_code == API_ERROR, refused.stderr
    assert "Admin" in refused.stderr
    assert cli.json("whoami")["role"] == "Admin"

    password = "ops passphrase number 1"
    created = cli.ok("users", "create", "cli-ops", "--role", "Operator", "--password-stdin",
                     input=password + "\n")  # fmt: skip
    assert "created" in created.stderr
    user_id = created.stdout.strip()
    listed = {u["username"]: u for u in items(cli, "users", "list")}
    assert listed["cli-ops"]["id"] == user_id
    assert listed["cli-ops"]["role"] == "Operator"
    table = cli.ok("users", "list").stdout
    assert "cli-ops" in table
    assert "Operator" in table
    assert "active" in table

    ops = signed_in(server, tmp_path / "ops", "cli-ops", password)
    assert ops.json("whoami")["role"] == "Operator"
    # Not an Admin: refused with exit 3.
    assert ops.run("users", "list").exit_code == AUTH

    # A role change by name, in any case; the user's sessions end with it.
    changed = cli.json("users", "role", "CLI-OPS", "viewer")
    assert (changed["id"], changed["role"]) == (user_id, "Viewer")
    assert ops.run("whoami").exit_code == AUTH
    ops = signed_in(server, tmp_path / "ops2", "cli-ops", password)
    assert ops.json("whoami")["role"] == "Viewer"

    # Deactivated: it can no longer sign in; activated by id: it can again.
    assert cli.json("users", "deactivate", "cli-ops")["isActive"] is False
    again = Cli(server.base, tmp_path / "ops3")
    no = again.run("login", "--url", server.base, "-u", "cli-ops", "--password-stdin",
                   input=password + "\n")  # fmt: skip
    assert no.exit_code == AUTH
    assert cli.json("users", "activate", user_id)["isActive"] is True

    # A password reset asked for twice (hidden) at the prompt; a weak one is refused.
    weak = cli.run("users", "password", "cli-ops", "--password-stdin", input="short\n")
    assert weak.exit_code == API_ERROR
    assert "password" in weak.stderr
    fresh = "ops passphrase number 2"
    cli.ok("users", "password", "cli-ops", input=f"{fresh}\n{fresh}\n")
    signed_in(server, tmp_path / "ops4", "cli-ops", fresh)

    # Not confirmed: exit 1, kept; --yes: deleted, and then not found (exit 4).
    kept = cli.run("users", "delete", "cli-ops", input="n\n")
    assert kept.exit_code == API_ERROR
    assert "cli-ops" in {u["username"] for u in items(cli, "users", "list")}
    assert cli.json("users", "delete", "cli-ops", "--yes") == {"id": user_id, "deleted": True}
    for args in (("role", "cli-ops", "admin"), ("delete", user_id, "--yes")):
        assert cli.run("users", *args).exit_code == NOT_FOUND
    assert cli.run("users", "role", "nobody", "superuser").exit_code == USAGE


def test_an_admin_sets_its_own_password_with_the_current_one(
    cli: Cli, server: RotaProcess, tmp_path: Path
) -> None:
    first = "second admin passphrase"
    cli.ok("users", "create", "cli-admin2", "--role", "admin", "--password-stdin",
           input=first + "\n")  # fmt: skip
    admin2 = signed_in(server, tmp_path / "a", "cli-admin2", first)
    new = "second admin passphrase, renewed"
    wrong = admin2.run("users", "password", "cli-admin2", "--password-stdin",
                       input=f"{new}\nnot the current one\n")  # fmt: skip
    assert wrong.exit_code == API_ERROR
    assert "currentPassword" in wrong.stderr
    done = admin2.run("users", "password", "cli-admin2", "--password-stdin",
                      input=f"{new}\n{first}\n")  # fmt: skip
    assert done.exit_code == OK, done.stderr
    assert "rota login" in done.stderr  # its own sessions ended
    signed_in(server, tmp_path / "b", "cli-admin2", new)
    cli.ok("users", "delete", "cli-admin2", "--yes")


# --- rota notifications ------------------------------------------------------------------------


def test_a_webhook_subscription_shows_its_generated_secret_once(cli: Cli) -> None:
    made = cli.run("notifications", "create", "ops-hook", "--event", "occurrence.failed",
                   "-e", "job.auto_disabled", "--webhook", HOOK, "--tag", "billing")  # fmt: skip
    assert made.exit_code == OK, made.stderr
    sub_id = made.stdout.strip()
    secret = made.stderr.strip().splitlines()[-1]
    assert len(secret) >= 32
    assert secret not in made.stdout
    shown = cli.json("notifications", "show", "ops-hook")
    assert shown["id"] == sub_id
    assert shown["secret"] is None
    assert shown["hasSecret"] is True
    assert (shown["scope"], shown["tag"]) == ("tag", "billing")
    assert sorted(shown["events"]) == ["job.auto_disabled", "occurrence.failed"]
    table = cli.ok("notifications", "list").stdout
    assert "ops-hook" in table
    assert HOOK in table
    assert "tag billing" in table
    assert secret not in cli.ok("notifications", "show", sub_id).stdout

    # A secret of one's own comes from stdin and is never printed.
    own = "a secret of my own, 16+ chars"
    given = cli.run("notifications", "create", "ops-hook-2", "-e", "silence.alert", "--webhook",
                    HOOK, "--secret-stdin", input=own + "\n")  # fmt: skip
    assert given.exit_code == OK, given.stderr
    assert own not in given.stdout + given.stderr
    assert "shown this once" not in given.stderr
    cli.ok("notifications", "delete", "ops-hook-2", "--yes")

    # Switched off and on; a test delivery is queued and shows in the delivery log.
    assert cli.json("notifications", "disable", "ops-hook")["enabled"] is False
    assert cli.json("notifications", "enable", sub_id)["enabled"] is True
    delivery_id = cli.ok("notifications", "test", "ops-hook").stdout.strip()
    log = cli.json("notifications", "deliveries", "ops-hook")
    assert delivery_id in {d["id"] for d in log["deliveries"]}
    assert "test" in cli.ok("notifications", "deliveries", sub_id).stdout

    kept = cli.run("notifications", "delete", "ops-hook", input="n\n")
    assert kept.exit_code == API_ERROR
    assert cli.json("notifications", "delete", "ops-hook", "--yes")["deleted"] is True
    assert cli.run("notifications", "show", sub_id).exit_code == NOT_FOUND
    assert cli.run("notifications", "test", "ops-hook").exit_code == NOT_FOUND


def test_an_email_subscription_of_one_job_and_the_refusals(cli: Cli) -> None:
    job = cli.json("jobs", "create", "--type", "cli.ok", "--name", "notified job", "--cron", FAR)
    sub = cli.json("notifications", "create", "mail-ops", "-e", "occurrence.timed_out",
                   "--email", "ops@example.com", "--email", "oncall@example.com",
                   "--job", "notified job")  # fmt: skip
    assert (sub["channel"], sub["scope"], sub["jobId"]) == ("email", "job", job["id"])
    assert sub["recipients"] == ["ops@example.com", "oncall@example.com"]
    assert sub["secret"] is None

    base = ("notifications", "create", "bad", "-e", "occurrence.failed")
    both = cli.run(*base, "--webhook", HOOK, "--email", "a@example.com")
    assert both.exit_code == USAGE
    assert cli.run(*base).exit_code == USAGE
    assert cli.run(*base[:4], "-e", "no.such.event", "--webhook", HOOK).exit_code == USAGE
    # What the API refuses: exit 1, naming the field.
    refused = cli.run(*base, "--webhook", "ftp://hooks.example.com/x")
    assert refused.exit_code == API_ERROR
    assert "url" in refused.stderr
    assert cli.run(*base, "--email", "a@example.com", "--job", "no such job").exit_code == NOT_FOUND

    # Two of one name: the name is ambiguous (exit 1), the ids are not.
    twin = cli.json("notifications", "create", "mail-ops", "-e", "silence.alert",
                    "--email", "ops@example.com")  # fmt: skip
    assert cli.run("notifications", "show", "mail-ops").exit_code == API_ERROR
    for made in (sub, twin):
        cli.ok("notifications", "delete", made["id"], "--yes")


# --- rota audit --------------------------------------------------------------------------------


def test_the_audit_log_names_what_changed_and_filters(
    cli: Cli, server: RotaProcess, tmp_path: Path
) -> None:
    job = cli.json("jobs", "create", "--type", "cli.ok", "--name", "audited job", "--cron", FAR)
    cli.ok("jobs", "edit", job["id"], "--description", "now described")

    updates = items(cli, "audit", "--action", "job.updated", "--resource-id", job["id"])
    assert len(updates) == 1
    assert (updates[0]["actor"], updates[0]["resourceType"]) == (ADMIN_USER, "job")
    table = cli.ok("audit", "--resource-id", job["id"]).stdout
    assert "job audited job" in table  # its name, not only its id
    assert "job.created" in table
    assert "job.updated" in table
    assert 'description: "" → now described' in table

    mine = items(cli, "audit", "--actor", ADMIN_USER, "--resource-type", "job", "--since", "1h")
    assert mine
    assert all(e["actor"] == ADMIN_USER and e["resourceType"] == "job" for e in mine)
    assert items(cli, "audit", "--until", "2000-01-01") == []
    assert items(cli, "audit", "--actor", "nobody at all") == []

    # One page at a time, or every page.
    first = cli.json("audit", "--limit", "1")
    assert len(first["items"]) == 1
    assert first["nextCursor"]
    second = cli.json("audit", "--limit", "1", "--cursor", first["nextCursor"])
    assert second["items"][0]["id"] != first["items"][0]["id"]
    every = cli.json("audit", "--all")
    assert every["nextCursor"] is None
    assert len(every["items"]) >= 3

    assert cli.run("audit", "--since", "yesterday").exit_code == USAGE
    assert cli.run("audit", "--limit", "0").exit_code == USAGE
    password = "viewer passphrase 42"
    server.api("POST", "/users", json={"username": "audit-viewer", "password": password})
    viewer = signed_in(server, tmp_path, "audit-viewer", password)
    refused = viewer.run("audit")
    assert refused.exit_code == AUTH
    assert "not allowed" in refused.stderr
    assert orjson.loads(cli.ok("audit", "--action", "user.created", "--json").stdout)["items"]
