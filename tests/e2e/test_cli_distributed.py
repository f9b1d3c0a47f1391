"""The operator's CLI against the distributed mode: a ``rota server`` and a ``rota worker``
process on the real PostgreSQL, Redis and RabbitMQ (one deployment for the module), driven
through the main commands as an operator would."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
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
    assert cli.json("jobs", "disable", "dist-ok")["isActive"] is False
    assert cli.json("jobs", "enable", "dist-ok")["isActive"] is True
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


def test_a_dependency_chain_on_the_distributed_mode(cli: Cli) -> None:
    """On PostgreSQL, Redis and RabbitMQ: A (fails, dead-lettered) -> B on failure, A -> C on
    success; triggering A runs B and skips C with its reason, in one graph run."""
    worker = ("--worker", "cli")
    cli.json("jobs", "create", "--type", "cli.fail", "--name", "dist-a", *worker)
    cli.json("jobs", "create", "--type", "cli.ok", "--name", "dist-b", *worker,
             "--after", "dist-a:failure")  # fmt: skip
    cli.json("jobs", "create", "--type", "cli.ok", "--name", "dist-c", *worker,
             "--after", "dist-a")  # fmt: skip
    triggered = cli.run("jobs", "trigger", "dist-a", "--wait", "--json")
    assert triggered.exit_code == API_ERROR  # the run failed
    root = orjson.loads(triggered.stdout)
    assert root["statusName"] == "Failed"

    def finished() -> list[dict[str, Any]]:
        runs: list[dict[str, Any]] = cli.json(
            "graph-runs", "list", "--job", "dist-a", "--status", "finished"
        )["items"]
        return runs

    wait_until(finished, 30, "the graph run to finish")
    [run] = finished()
    nodes = {n["name"]: n for n in cli.json("graph-runs", "show", run["id"])["nodes"]}
    assert nodes["dist-a"]["occurrenceId"] == root["id"]
    assert nodes["dist-b"]["statusName"] == "Completed"
    assert nodes["dist-c"]["statusName"] == "Skipped"
    assert nodes["dist-c"]["reason"] == "upstream dist-a Failed; needs success"
