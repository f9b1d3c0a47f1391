"""The operator's CLI (``rota login``, ``jobs``, ``runs``, ``failed``, ``workers``, ``cron``)
against one real ``rota dev`` server for the module: what it prints (tables, ``--json``), the
sign-in it keeps, and the exit codes docs/cli.md promises."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from rota.cli import app

from .cli import Cli
from .conftest import ADMIN_USER, HERE, RotaProcess, free_port, wait_until

pytestmark = pytest.mark.slow

OK, API_ERROR, USAGE, AUTH, NOT_FOUND, UNREACHABLE = 0, 1, 2, 3, 4, 5
FAR = "0 0 1 1 *"
"""A schedule that does not fire during the test: its jobs run when triggered."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RotaProcess]:
    root = tmp_path_factory.mktemp("cli-server")
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
    made = Cli(server.base, tmp_path_factory.mktemp("cli-config"))
    made.login()
    return made


def create(cli: Cli, *args: str) -> dict[str, Any]:
    job: dict[str, Any] = cli.json("jobs", "create", *args)
    return job


def test_login_keeps_a_private_token_that_env_variables_override(
    cli: Cli, server: RotaProcess, tmp_path: Path
) -> None:
    path = cli.config / "rota" / "credentials.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    entry = cli.credentials()["servers"][server.base]
    assert entry["username"] == ADMIN_USER
    assert entry["refreshToken"]
    me = cli.json("whoami")
    assert (me["username"], me["role"], me["url"]) == (ADMIN_USER, "Admin", server.base)

    stranger = Cli(server.base, tmp_path / "empty")
    result = stranger.run("jobs", "list")
    assert result.exit_code == AUTH
    assert "rota login" in result.stderr
    # ROTA_URL and ROTA_TOKEN need no file, and win over one.
    token = entry["accessToken"]
    listed = stranger.run("jobs", "list", "--json", ROTA_URL=server.base, ROTA_TOKEN=token)
    assert listed.exit_code == OK, listed.stderr
    assert "items" in orjson.loads(listed.stdout)
    bad = cli.run("jobs", "list", ROTA_TOKEN="not-a-token")
    assert bad.exit_code == AUTH
    wrong = stranger.run(
        "login", "--url", server.base, "-u", ADMIN_USER, "--password-stdin", input="wrong\n"
    )
    assert wrong.exit_code == AUTH
    assert not (stranger.config / "rota" / "credentials.json").exists()


def test_an_expired_access_token_is_renewed_with_the_refresh_token(
    server: RotaProcess, tmp_path: Path
) -> None:
    user = Cli(server.base, tmp_path)
    user.login()
    path = tmp_path / "rota" / "credentials.json"
    data = user.credentials()
    before = data["servers"][server.base]
    before["expiresAt"] = 0  # as if 15 minutes had passed
    path.write_bytes(orjson.dumps(data))
    user.ok("jobs", "list")
    after = user.credentials()["servers"][server.base]
    assert after["refreshToken"] != before["refreshToken"]
    assert after["expiresAt"] > 0
    # A refresh token that no longer works (used up): "sign in again", exit 3.
    after["expiresAt"] = 0
    after["refreshToken"] = before["refreshToken"]
    path.write_bytes(orjson.dumps({"current": server.base, "servers": {server.base: after}}))
    result = user.run("jobs", "list")
    assert result.exit_code == AUTH
    assert "rota login" in result.stderr
    user.login()
    user.ok("logout")
    assert server.base not in user.credentials()["servers"]
    assert user.run("jobs", "list").exit_code == AUTH


def test_a_viewer_reads_but_may_not_change(cli: Cli, server: RotaProcess, tmp_path: Path) -> None:
    password = "viewer passphrase 42"
    server.api("POST", "/users", json={"username": "cli-viewer", "password": password})
    viewer = Cli(server.base, tmp_path)
    viewer.ok("login", "--url", server.base, "-u", "cli-viewer", "--password-stdin", input=password)
    assert viewer.json("whoami")["role"] == "Viewer"
    viewer.ok("jobs", "list")
    refused = viewer.run("jobs", "create", "--type", "cli.ok", "--cron", FAR)
    assert refused.exit_code == AUTH
    assert "not allowed" in refused.stderr


def test_names_are_shown_as_written_and_edit_takes_a_json_file(cli: Cli, tmp_path: Path) -> None:
    name = "[bold]odd[/] name [/x]"  # would be rich markup (or break it) if read as such
    job = create(cli, "--type", "cli.ok", "--name", name, "--cron", FAR, "--timeout", "30")
    assert job["timeoutSeconds"] == 30
    assert name in cli.ok("jobs", "show", job["id"]).stdout
    assert name in cli.ok("jobs", "list", "--search", "odd").stdout
    patch = tmp_path / "patch.json"
    patch.write_text('{"timeoutSeconds": null, "description": "from a file"}')
    edited = cli.json("jobs", "edit", job["id"], "-f", str(patch), "--description", "option")
    assert (edited["timeoutSeconds"], edited["description"]) == (None, "option")


def test_jobs_from_create_to_delete(cli: Cli) -> None:
    job = create(
        cli, "--type", "cli.ok", "--name", "cli-life", "--cron", FAR, "--tag", "cli", "--tag", "x"
    )
    assert (job["displayName"], job["tags"], job["isActive"]) == ("cli-life", ["cli", "x"], True)
    listed = cli.json("jobs", "list", "--tag", "cli")
    assert job["id"] in [j["id"] for j in listed["items"]]
    table = cli.ok("jobs", "list", "--search", "cli-life").stdout
    assert "cli-life" in table
    assert job["id"] in table
    assert "0 0 1 1 *" in table
    assert cli.json("jobs", "show", "cli-life")["id"] == job["id"]  # by name
    assert "cli.ok" in cli.ok("jobs", "show", job["id"]).stdout  # by id

    edited = cli.json("jobs", "edit", "cli-life", "--priority", "high", "--data", '{"n": 1}')
    assert (edited["priority"], edited["jobData"], edited["version"]) == (3, {"n": 1}, 2)
    assert cli.json("jobs", "disable", "cli-life")["isActive"] is False
    assert "disabled" in cli.ok("jobs", "list", "--disabled").stdout
    assert cli.json("jobs", "enable", "cli-life")["isActive"] is True
    paused = cli.json("jobs", "pause", "cli-life", "--note", "freeze", "--until", "2099-01-01")
    assert (paused["paused"], paused["pauseNote"], paused["isActive"]) == (True, "freeze", True)
    assert "freeze" in cli.ok("jobs", "show", "cli-life").stdout
    assert cli.json("jobs", "skip", "cli-life", "2", "--note", "deploy")["skipNext"] == 2
    assert cli.json("jobs", "skip", "cli-life", "0")["skipNext"] == 0
    assert cli.json("jobs", "resume", "cli-life")["paused"] is False

    run = cli.json("jobs", "trigger", "cli-life", "--reason", "from the cli", "--wait")
    assert (run["statusName"], run["triggerReason"]) == ("Completed", "from the cli")
    runs = cli.json("runs", "list", "--job", "cli-life")
    assert [r["id"] for r in runs["items"]] == [run["id"]]
    shown = cli.ok("runs", "show", run["id"]).stdout
    assert "Completed" in shown
    assert "Running" in shown
    logs = cli.ok("runs", "logs", run["id"]).stdout
    assert "cli ok attempt 1" in logs
    lines = [
        orjson.loads(line)
        for line in cli.ok("runs", "logs", run["id"], "--json").stdout.splitlines()
    ]
    assert [line["message"] for line in lines] == ["cli ok attempt 1"]

    # the past fires of its cron expression (1 January) in a window, run by a backfill
    window = ("--from", "2024-06-01T00:00:00Z", "--to", "2026-06-01T00:00:00Z")
    filled = cli.json("jobs", "backfill", "cli-life", *window)
    assert (filled["fires"], filled["created"], filled["alreadyRecorded"]) == (2, 2, 0)
    assert cli.json("jobs", "backfill", "cli-life", *window)["created"] == 0

    # the same command again with its idempotency key shows the job it created the first time
    keyed = ("--type", "cli.ok", "--name", "cli-keyed", "--cron", FAR)
    first = create(cli, *keyed, "--idempotency-key", "cli-key-1")
    assert create(cli, *keyed, "--idempotency-key", "cli-key-1")["id"] == first["id"]
    cli.ok("jobs", "delete", first["id"], "--yes")

    assert cli.run("jobs", "delete", "cli-life", input="n\n").exit_code != OK  # asked: no
    cli.ok("jobs", "delete", "cli-life", "--yes")
    missing = cli.run("jobs", "show", job["id"])
    assert missing.exit_code == NOT_FOUND


def test_an_interval_job_with_bounds(cli: Cli) -> None:
    start = ("--start", "2031-01-01T00:00:00Z", "--end", "2031-02-01T00:00:00Z")
    job = create(cli, "--type", "cli.ok", "--every", "1h30m", *start, "--max-runs", "4")
    assert (job["every"], job["nextRunAt"], job["maxRuns"]) == ("1h30m", "2031-01-01T00:00:00Z", 4)
    shown = cli.ok("jobs", "show", job["id"]).stdout
    assert "every 1h30m" in shown
    assert "0 of 4" in shown
    edited = cli.json("jobs", "edit", job["id"], "--jitter", "5", "--misfire-window", "120")
    assert (edited["jitterSeconds"], edited["misfireWindowSeconds"]) == (5.0, 120.0)
    bad = cli.run("jobs", "create", "--type", "cli.ok", "--every", "soon")
    assert bad.exit_code == API_ERROR
    assert "every" in bad.stderr
    cli.ok("jobs", "delete", job["id"], "--yes")
    after = ("--from", "2031-01-01T00:00:00Z", "--count", "2")
    fires = cli.json("cron", "preview", "--every", "90m", *after)["fires"]
    assert fires == ["2031-01-01T01:30:00+00:00", "2031-01-01T03:00:00+00:00"]
    assert cli.run("cron", "preview").exit_code == USAGE


def test_exit_codes_and_problem_messages(cli: Cli, server: RotaProcess) -> None:
    bad = cli.run("jobs", "create", "--type", "cli.ok", "--cron", "61 * * * *")
    assert bad.exit_code == API_ERROR
    assert "cronExpression" in bad.stderr  # the field at fault, from the problem details
    assert cli.run("jobs", "show", "no-such-job").exit_code == NOT_FOUND
    assert cli.run("runs", "show", "01a21173-0000-7000-8000-000000000000").exit_code == NOT_FOUND
    assert cli.run("runs", "show", "not-a-uuid").exit_code == USAGE
    assert cli.run("jobs", "frobnicate").exit_code == USAGE
    assert cli.run("jobs", "create", "--type", "cli.ok", "--priority", "urgent").exit_code == USAGE

    for _ in range(2):
        create(cli, "--type", "cli.ok", "--name", "cli-twin", "--cron", FAR)
    twins = cli.run("jobs", "show", "cli-twin")
    assert twins.exit_code == API_ERROR
    assert "2 jobs are named" in twins.stderr

    down = cli.run("jobs", "list", ROTA_URL=f"http://127.0.0.1:{free_port()}", ROTA_TOKEN="x")
    assert down.exit_code == UNREACHABLE
    assert "cannot reach" in down.stderr


def test_failed_runs_list_show_retry_resolve(cli: Cli) -> None:
    job = create(cli, "--type", "cli.fail", "--name", "cli-failing", "--cron", FAR)
    failed_run = cli.run("jobs", "trigger", "cli-failing", "--wait", "--json")
    assert failed_run.exit_code == API_ERROR  # --wait: the run did not complete
    assert orjson.loads(failed_run.stdout)["statusName"] == "Failed"

    def records(*args: str) -> list[dict[str, Any]]:
        return list(cli.json("failed", "list", "--job", job["id"], *args)["items"])

    wait_until(lambda: len(records()) == 1, 15, "the dead-letter record")
    record = records()[0]
    assert record["failureType"] == "permanent"
    assert "fails on purpose" in cli.ok("failed", "show", record["id"]).stdout
    assert "cli.fail" in cli.ok("failed", "list", "--job", "cli-failing").stdout

    retried = cli.json("failed", "retry", record["id"])
    assert retried["attempt"] == 2
    assert records("--state", "resolved")[0]["id"] == record["id"]  # a retry resolves it
    wait_until(lambda: len(records()) == 1, 15, "the retry's dead-letter record")
    second = records()[0]
    resolved = cli.json("failed", "resolve", second["id"], "--note", "known", "--action", "ignored")
    assert (resolved["resolved"], resolved["resolutionNote"]) == (True, "known")
    assert records() == []
    assert len(records("--state", "all")) == 2
    reopened = cli.json("failed", "resolve", second["id"], "--reopen")
    assert reopened["resolved"] is False


def test_logs_follow_a_run_to_its_end_and_cancel_stops_one(cli: Cli) -> None:
    create(cli, "--type", "cli.steps", "--name", "cli-steps", "--cron", FAR)
    run = cli.json("jobs", "trigger", "cli-steps", "--data", '{"lines": 3, "step": 0.3}')
    followed = cli.ok("runs", "logs", run["id"], "--follow").stdout
    assert [line.split("INFO", 1)[1].strip() for line in followed.splitlines()] == [
        f"step {n} of 3" for n in (1, 2, 3)
    ]
    assert cli.json("runs", "show", run["id"])["statusName"] == "Completed"

    long = cli.json("jobs", "trigger", "cli-steps", "--data", '{"lines": 200, "step": 0.2}')
    wait_until(
        lambda: cli.json("runs", "show", long["id"])["statusName"] == "Running", 15, "Running"
    )
    cli.ok("runs", "cancel", long["id"], "--reason", "enough")
    wait_until(
        lambda: cli.json("runs", "show", long["id"])["statusName"] == "Cancelled",
        15,
        "the run cancelled",
    )
    ended = cli.run("runs", "cancel", long["id"])
    assert ended.exit_code == API_ERROR  # an ended run: 409


def test_workers_and_cron_preview(cli: Cli) -> None:
    groups = cli.json("workers")["items"]
    assert "cli.fail" in groups[0]["instances"][0]["jobTypes"]
    assert "cli.steps" in cli.ok("workers").stdout

    fires = cli.json(
        "cron", "preview", "0 6 * * 1-5", "--tz", "Europe/Berlin", "--count", "2",
        "--from", "2026-01-02T00:00:00Z",
    )["fires"]  # fmt: skip
    assert fires == ["2026-01-02T05:00:00+00:00", "2026-01-05T05:00:00+00:00"]
    table = cli.ok("cron", "preview", "*/15 * * * *", "--from", "2026-01-01T00:00:00").stdout
    assert "2026-01-01 00:15:00" in table
    bad = cli.run("cron", "preview", "bad")
    assert bad.exit_code == API_ERROR
    assert "5 fields" in bad.stderr


def test_shell_completion_offers_the_job_names(cli: Cli, tmp_path: Path) -> None:
    create(cli, "--type", "cli.ok", "--name", "cli-complete-me", "--cron", FAR)

    def complete(user: Cli, words: str) -> list[str]:
        result = CliRunner().invoke(
            app,
            [],
            prog_name="rota",
            env=user.env(_ROTA_COMPLETE="complete_bash", COMP_WORDS=words, COMP_CWORD="3"),
        )
        assert result.exit_code == 0, result.stderr
        return result.stdout.split()

    assert complete(cli, "rota jobs trigger cli-comp") == ["cli-complete-me"]
    assert complete(Cli(cli.url, tmp_path), "rota jobs trigger cli-comp") == []  # signed out


def test_the_installed_command_prints_its_version_and_completion() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    version = subprocess.run(
        [sys.executable, "-m", "rota", "--version"], capture_output=True, text=True, env=env
    )
    assert version.returncode == 0
    assert version.stdout.startswith("rota ")
    # The shell is named, not detected from the parent processes (under pytest-xdist the
    # nearest is `sh`, which Typer does not complete): Typer's own switch for tests.
    completion = subprocess.run(
        [sys.executable, "-m", "rota", "--show-completion", "bash"],
        capture_output=True,
        text=True,
        env={**env, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"},
    )
    assert completion.returncode == 0
    assert "complete" in completion.stdout


def test_limits_set_list_delete(cli: Cli) -> None:
    cli.ok("limits", "set", "cli.steps", "--max", "2", "--key", "customerId")
    cli.ok("limits", "set", "cli.ok", "--rate", "5")
    listed = cli.json("limits", "list")
    assert [(x["type"], x["max"], x["key"], x["ratePerSecond"]) for x in listed["limits"]] == [
        ("cli.ok", None, None, 5.0),
        ("cli.steps", 2, "customerId", None),
    ]
    table = cli.ok("limits", "list", "--waiting").stdout
    assert "customerId" in table
    assert "5/s" in table
    assert cli.run("limits", "set", "cli.ok").exit_code == USAGE
    bad = cli.run("limits", "set", "cli.ok", "--max", "0")
    assert bad.exit_code == API_ERROR
    assert "max" in bad.stderr
    cli.ok("limits", "delete", "cli.ok")
    assert cli.run("limits", "delete", "cli.ok").exit_code == NOT_FOUND
    cli.ok("limits", "delete", "cli.steps")
    assert cli.json("limits", "list")["limits"] == []


def test_a_dependency_graph_runs_from_its_first_job(cli: Cli) -> None:
    """Embedded, end to end: A -> B on success, A -> C on failure, D after B and C on
    completion (fan-in). Triggering A runs the chain: B runs, C is skipped with its reason,
    D runs once both are final; one graph run links the four occurrences. A cycle is refused."""
    create(cli, "--type", "cli.ok", "--name", "chain-a")  # no schedule: runs when triggered
    create(cli, "--type", "cli.ok", "--name", "chain-b", "--after", "chain-a")
    create(cli, "--type", "cli.ok", "--name", "chain-c", "--after", "chain-a:failure")
    fan_in = ("--after", "chain-b:completion", "--after", "chain-c:completion")
    create(cli, "--type", "cli.fail", "--name", "chain-d", *fan_in)
    dependents = cli.json("jobs", "deps", "chain-a")["dependents"]
    assert sorted((d["name"], d["on"]) for d in dependents) == [
        ("chain-b", "success"),
        ("chain-c", "failure"),
    ]
    cycle = cli.run("jobs", "edit", "chain-a", "--after", "chain-d")
    assert cycle.exit_code != OK
    assert "cycle" in cycle.stderr

    root = cli.json("jobs", "trigger", "chain-a", "--wait")
    assert root["statusName"] == "Completed"

    def finished() -> list[dict[str, Any]]:
        runs: list[dict[str, Any]] = cli.json(
            "graph-runs", "list", "--job", "chain-a", "--status", "finished"
        )["items"]
        return runs

    wait_until(finished, 30, "the graph run to finish")
    [run] = finished()
    shown = cli.json("graph-runs", "show", run["id"])
    nodes = {n["name"]: n for n in shown["nodes"]}
    assert nodes["chain-a"]["occurrenceId"] == root["id"]
    assert nodes["chain-b"]["statusName"] == "Completed"
    assert nodes["chain-c"]["statusName"] == "Skipped"
    assert nodes["chain-c"]["reason"] == "upstream chain-a Completed; needs failure"
    assert nodes["chain-d"]["statusName"] == "Failed"
    assert [nodes[n]["level"] for n in ("chain-a", "chain-b", "chain-c", "chain-d")] == [0, 1, 1, 2]
    d_run = cli.json("runs", "show", nodes["chain-d"]["occurrenceId"])
    assert d_run["graphRunId"] == run["id"]
    assert "graph run" in cli.ok("graph-runs", "show", run["id"]).stdout


def test_api_keys_create_use_login_and_revoke(
    cli: Cli, server: RotaProcess, tmp_path: Path
) -> None:
    created = cli.json("keys", "create", "cli-svc", "--role", "operator", "--tag", "svc")
    key = created["key"]
    assert key.startswith("rota_")
    assert (created["role"], created["tags"]) == ("Operator", ["svc"])
    # ROTA_URL + ROTA_API_KEY: no file, no sign-in
    service = Cli(server.base, tmp_path / "service")
    env = {"ROTA_URL": server.base, "ROTA_API_KEY": key}
    made = service.run(
        "jobs", "create", "--type", "cli.ok", "--cron", FAR, "--tag", "svc", "--json", **env
    )
    assert made.exit_code == OK, made.stderr
    assert orjson.loads(made.stdout)["createdBy"] == "key:cli-svc"
    outside = service.run("jobs", "create", "--type", "cli.ok", "--cron", FAR, **env)
    assert outside.exit_code == AUTH
    assert "tags" in outside.stderr
    whoami = service.run("whoami", **env)
    assert whoami.exit_code == OK, whoami.stderr
    assert "API key rota_" in whoami.stdout
    # rota login --api-key keeps it in the private file
    kept = Cli(server.base, tmp_path / "kept")
    kept.ok("login", "--url", server.base, "--api-key", "--password-stdin", input=key + "\n")
    entry = kept.credentials()["servers"][server.base]
    assert entry["accessToken"] == key
    assert [j["createdBy"] for j in kept.json("jobs", "list")["items"]] == ["key:cli-svc"]
    assert kept.run("keys", "list").exit_code == AUTH  # an Operator key: no key management
    # the Admin sees it used, and revokes it: refused at once
    listed = {k["name"]: k for k in cli.json("keys", "list")}
    assert listed["cli-svc"]["lastUsedAt"] is not None
    cli.ok("keys", "revoke", created["id"])
    assert kept.run("jobs", "list").exit_code == AUTH
    assert service.run("jobs", "list", **env).exit_code == AUTH
    assert cli.json("keys", "list")[0]["revokedAt"] is not None


def test_dispatch_stop_status_resume(cli: Cli, server: RotaProcess) -> None:
    assert cli.json("dispatch", "status")["paused"] is False
    try:
        stopped = cli.json("dispatch", "stop", "--reason", "cli maintenance")
        assert stopped["paused"] is True
        assert stopped["by"] == ADMIN_USER
        table = cli.ok("dispatch", "status").stdout
        assert "stopped" in table
        assert "cli maintenance" in table
        assert server.api("GET", "/health/ready")["warnings"] == ["dispatching stopped"]
        missing = cli.run("dispatch", "stop")
        assert missing.exit_code == 2  # typer's usage error: --reason is required
        assert "--reason" in missing.stderr
    finally:
        resumed = cli.json("dispatch", "resume", "--reason", "done")
    assert resumed["paused"] is False
    assert server.api("GET", "/health/ready")["warnings"] == []


def test_jobs_show_lists_next_fires_latest_runs_and_effective_values(cli: Cli) -> None:
    job = create(
        cli, "--type", "cli.ok", "--name", "cli upcoming", "--cron", "30 6 * * *",
        "--tz", "America/New_York", "--max-retries", "2",
    )  # fmt: skip
    shown = cli.ok("jobs", "show", job["id"], "--fires", "3").stdout
    assert "next fires" in shown
    assert "America/New_York" in shown
    assert shown.count("06:30:00-0") == 3  # the local times, with their UTC offset
    assert "2 (job)" in shown  # max retries, and where it comes from
    assert "latest runs" in shown
    assert "runs planned" not in shown  # no limit on its runs
    assert cli.json("jobs", "show", job["id"])["id"] == job["id"]  # --json: the job alone


def test_flags_are_shown_as_flags_in_help() -> None:
    shown = CliRunner().invoke(app, ["runs", "list", "--help"], env={"COLUMNS": "120"})
    assert shown.exit_code == 0, shown.output
    assert "--json" in shown.output
    assert "<bool>" not in shown.output  # a flag takes no value


def test_bulk_retry_resolve_delete_and_cancel_with_confirmation(cli: Cli) -> None:
    job = create(cli, "--type", "cli.fail", "--name", "cli-bulk-failing", "--cron", FAR)
    for _ in range(3):
        cli.run("jobs", "trigger", job["id"], "--wait", "--force")

    def open_records() -> list[dict[str, Any]]:
        return list(cli.json("failed", "list", "--job", job["id"])["items"])

    wait_until(lambda: len(open_records()) == 3, 15, "three failed-run records")
    # asked first: "no" does nothing (exit code 2)
    declined = cli.run("failed", "retry", "--all", "-q", "job:cli-bulk-failing", input="n\n")
    assert declined.exit_code == USAGE
    assert "Retry 3 failed runs?" in declined.stderr
    assert len(open_records()) == 3
    retried = cli.run("failed", "retry", "--all", "--job", "cli-bulk-failing", "--yes", "--json")
    assert retried.exit_code == 0, retried.stderr
    [answer] = orjson.loads(retried.stdout)
    assert (answer["matched"], answer["done"], len(answer["created"])) == (3, 3, 3)
    wait_until(lambda: len(open_records()) == 3, 15, "the retries' records")  # they fail again
    resolved = cli.run("runs", "retry", "--all", "--job", job["id"], "-y")  # the same, by runs
    assert resolved.exit_code == 0, resolved.stderr
    assert "3 done, 0 not done" in resolved.stderr
    wait_until(lambda: len(open_records()) == 3, 15, "the second retries' records")
    note = cli.run("failed", "resolve", "--all", "--job", job["id"], "--note", "bulk", "-y")
    assert note.exit_code == 0, note.stderr
    assert open_records() == []
    gone = cli.run("failed", "delete", "--all", "--job", job["id"], "--resolved", "-y")
    assert "9 done" in gone.stderr
    assert cli.json("failed", "list", "--job", job["id"], "--state", "all")["items"] == []
    nothing = cli.run("runs", "cancel", "--all", "--job", job["id"], "-y")
    assert nothing.exit_code == 0
    assert "nothing to cancel: no runs match" in nothing.stderr
    both = cli.run("runs", "cancel", "01a227c5-0000-7000-8000-000000000000", "--all")
    assert both.exit_code == USAGE
