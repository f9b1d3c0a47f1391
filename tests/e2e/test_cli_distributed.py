"""The operator's CLI against the distributed mode: a ``rota server`` and a ``rota worker``
process on the real PostgreSQL, Redis and RabbitMQ (one deployment for the module), driven
through the main commands as an operator would."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .cli import Cli
from .conftest import HERE, wait_until
from .distributed import Cluster, fresh_deployment

pytestmark = pytest.mark.slow

API_ERROR = 1
FAR = "0 0 1 1 *"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("cli-distributed")
    (root / "logs").mkdir()
    with fresh_deployment(root / "data") as env:
        made = Cluster(env, root / "logs")
        try:
            made.server("server")
            made.worker("worker", worker_id="cli", jobs=HERE / "cli_jobs.py")
            wait_until(lambda: made.worker_instances() != [], 30, f"no worker: {made.logs()}")
            yield made
        finally:
            made.stop()


@pytest.fixture(scope="module")
def cli(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Cli:
    made = Cli(cluster.base.removesuffix("/api/v1"), tmp_path_factory.mktemp("cli-config"))
    made.login()
    return made


def test_jobs_runs_and_workers_on_the_distributed_mode(cli: Cli) -> None:
    groups = cli.json("workers")["items"]
    assert [g["workerId"] for g in groups] == ["cli"]
    assert "cli.ok" in cli.ok("workers").stdout

    job = cli.json(
        "jobs", "create", "--type", "cli.ok", "--name", "dist-ok", "--worker", "cli",
        "--cron", FAR, "--tag", "dist",
    )  # fmt: skip
    assert job["workerId"] == "cli"
    assert [j["id"] for j in cli.json("jobs", "list", "--tag", "dist")["items"]] == [job["id"]]
    assert cli.json("jobs", "pause", "dist-ok")["isActive"] is False
    assert cli.json("jobs", "resume", "dist-ok")["isActive"] is True
    edited = cli.json("jobs", "edit", "dist-ok", "--cron", "0 0 2 1 *")
    assert edited["cronExpression"] == "0 0 2 1 *"

    run = cli.json("jobs", "trigger", "dist-ok", "--wait")
    assert run["statusName"] == "Completed"
    assert run["instanceId"].startswith("cli-")

    def logged() -> bool:
        return "cli ok attempt 1" in cli.ok("runs", "logs", run["id"]).stdout

    wait_until(logged, 15, "the run's log line")  # logs travel apart from the status
    assert run["id"] in cli.ok("runs", "list", "--job", "dist-ok").stdout
    cli.ok("jobs", "delete", "dist-ok", "--yes")
    assert cli.run("jobs", "show", job["id"]).exit_code == 4


def test_failed_runs_and_cancel_on_the_distributed_mode(cli: Cli) -> None:
    job = cli.json(
        "jobs", "create", "--type", "cli.fail", "--name", "dist-fail", "--worker", "cli",
        "--cron", FAR,
    )  # fmt: skip
    failed = cli.run("jobs", "trigger", "dist-fail", "--wait")
    assert failed.exit_code == API_ERROR

    def records() -> list[dict[str, Any]]:
        return list(cli.json("failed", "list", "--job", job["id"])["items"])

    wait_until(lambda: len(records()) == 1, 20, "the dead-letter record")
    record = records()[0]
    assert record["failureType"] == "permanent"
    retried = cli.json("failed", "retry", record["id"])
    assert retried["attempt"] == 2
    wait_until(lambda: len(records()) == 1, 20, "the retry's dead-letter record")
    cli.ok("failed", "resolve", records()[0]["id"], "--note", "seen")
    assert records() == []

    cli.json(
        "jobs", "create", "--type", "cli.steps", "--name", "dist-steps", "--worker", "cli",
        "--cron", FAR,
    )  # fmt: skip
    long = cli.json("jobs", "trigger", "dist-steps", "--data", '{"lines": 200, "step": 0.2}')

    def status() -> str:
        return str(cli.json("runs", "show", long["id"])["statusName"])

    wait_until(lambda: status() == "Running", 20, "the run Running")
    cli.ok("runs", "cancel", long["id"])
    wait_until(lambda: status() == "Cancelled", 20, "the run Cancelled")
    assert "step 1 of 200" in cli.ok("runs", "logs", long["id"]).stdout
