"""``--query`` on ``rota runs list``, ``rota failed list`` and ``rota jobs list`` against a
real ``rota dev`` server: the same query filter as the API's ``?q=``, and a bad query's exit
code and message."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .cli import Cli
from .conftest import HERE, RotaProcess, wait_until

pytestmark = pytest.mark.slow

OK, API_ERROR = 0, 1
FAR = "0 0 1 1 *"


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    root = tmp_path_factory.mktemp("cli-query")
    (root / "logs").mkdir()
    proc = RotaProcess(root / "data", root / "logs", jobs=HERE / "cli_jobs.py")
    proc.start()
    try:
        made = Cli(proc.base, tmp_path_factory.mktemp("cli-query-config"))
        made.login()
        yield made
    finally:
        proc.stop()


def ids(items: list[dict[str, Any]], key: str = "jobId") -> set[str]:
    return {item[key] for item in items}


def test_list_commands_take_a_query(cli: Cli) -> None:
    big = cli.json(
        "jobs", "create", "--type", "cli.ok", "--name", "q big", "--cron", FAR,
        "--data", '{"customer": 42}',
    )  # fmt: skip
    small = cli.json(
        "jobs", "create", "--type", "cli.ok", "--name", "q small", "--cron", FAR,
        "--data", '{"customer": 7}',
    )  # fmt: skip
    failing = cli.json("jobs", "create", "--type", "cli.fail", "--name", "q failing", "--cron", FAR)
    for job in (big, small):
        cli.ok("jobs", "trigger", job["id"], "--wait")
    assert cli.run("jobs", "trigger", failing["id"], "--wait").exit_code == API_ERROR

    runs = cli.json("runs", "list", "--query", "type:cli.ok data.customer:42 status:completed")
    assert ids(runs["items"]) == {big["id"]}
    runs = cli.json("runs", "list", "-q", 'job:"q small" attempt:1')
    assert ids(runs["items"]) == {small["id"]}

    def failed() -> list[dict[str, Any]]:
        return list(cli.json("failed", "list", "--query", "type:cli.fail after:-1h")["items"])

    wait_until(lambda: len(failed()) == 1, 15, "the dead-letter record")
    assert ids(failed()) == {failing["id"]}

    jobs = cli.json("jobs", "list", "--query", "type:cli.ok data.customer:7")
    assert ids(jobs["items"], "id") == {small["id"]}
    table = cli.ok("jobs", "list", "--query", '"q big"').stdout
    assert "q big" in table
    assert "q small" not in table

    bad = cli.run("runs", "list", "--query", "stauts:failed")
    assert bad.exit_code == API_ERROR
    assert 'unknown qualifier "stauts" (did you mean status?)' in bad.stderr
