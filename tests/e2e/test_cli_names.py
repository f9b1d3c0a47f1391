"""Names where ids stood, in the CLI against a real ``rota dev`` server: the job's name in
``runs list``, ``failed list`` and ``graph-runs list``; the API's warnings printed on stderr
(``--json`` output unchanged); what the dashboard shows of an id (``…0e59d72df1bc``)
accepted wherever an id is, with the exit codes of none, several and not an id."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from .cli import Cli
from .conftest import HERE, RotaProcess, wait_until

pytestmark = pytest.mark.slow

OK, API_ERROR, USAGE, NOT_FOUND = 0, 1, 2, 4
FAR = "0 0 1 1 *"


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    root = tmp_path_factory.mktemp("cli-names")
    (root / "logs").mkdir()
    proc = RotaProcess(root / "data", root / "logs", jobs=HERE / "cli_jobs.py")
    proc.start()
    try:
        made = Cli(proc.base, tmp_path_factory.mktemp("cli-names-config"))
        made.login()
        yield made
    finally:
        proc.stop()


def shown(an_id: str) -> str:
    """An id as the dashboard's Executions page shows it."""
    return "…" + an_id[-12:]


def test_warnings_are_printed_on_stderr_and_json_stays_the_answer(cli: Cli) -> None:
    first = cli.ok("jobs", "create", "--type", "cli.ok", "--name", "Nightly sales", "--cron", FAR)
    assert "warning:" not in first.stderr
    twin = cli.run(
        "jobs", "create", "--type", "cli.ok", "--name", "nightly SALES", "--cron", FAR, "--json"
    )
    assert twin.exit_code == OK, twin.stderr
    created = orjson.loads(twin.stdout)  # stdout: the API's answer, nothing else
    [taken] = [w for w in created["warnings"] if w["code"] == "name_taken"]
    assert "warning: another job is named 'nightly SALES'" in twin.stderr
    assert "(name_taken)" in twin.stderr
    assert taken["jobIds"][0] in twin.stderr.replace("\n", "")
    typo = cli.run("jobs", "create", "--type", "cli.okk", "--name", "typo", "--cron", FAR)
    assert typo.exit_code == OK
    assert "warning: no worker has declared job type 'cli.okk'" in typo.stderr
    assert "(unknown_job_type)" in typo.stderr
    # by a name neither has exactly, neither (exit 1, naming their ids)
    both = cli.run("jobs", "show", "NIGHTLY sales")
    assert both.exit_code == API_ERROR
    assert created["id"] in both.stderr.replace("\n", "")
    renamed = cli.run("jobs", "edit", created["id"], "--name", "Weekly sales")
    assert renamed.exit_code == OK
    assert "warning:" not in renamed.stderr
    again = cli.run("jobs", "edit", created["id"], "--name", "NIGHTLY sales")
    assert again.exit_code == OK
    assert "(name_taken)" in again.stderr


def test_lists_show_job_names(cli: Cli) -> None:
    job = cli.json("jobs", "create", "--type", "cli.fail", "--name", "Failing feed", "--cron", FAR)
    run = cli.run("jobs", "trigger", job["id"], "--wait", "--json")
    assert run.exit_code == API_ERROR  # --wait: the run did not complete
    listed = cli.ok("runs", "list", "--job", job["id"]).stdout
    assert "Failing feed" in listed
    assert " job " in listed
    assert " type " not in listed
    items = cli.json("runs", "list", "--job", job["id"])["items"]
    assert items[0]["jobDisplayName"] == "Failing feed"
    assert items[0]["jobName"] == "cli.fail"  # the reference's field: the type, as it was
    wait_until(
        lambda: cli.json("failed", "list", "--job", job["id"])["items"], 15, "the failed record"
    )
    assert "Failing feed" in cli.ok("failed", "list", "--job", job["id"]).stdout


def test_graph_runs_list_names_the_root_job(cli: Cli) -> None:
    create = ("jobs", "create", "--type", "cli.ok")
    cli.ok(*create, "--name", "names-a")
    cli.ok(*create, "--name", "names-b", "--after", "names-a")
    assert cli.json("jobs", "trigger", "names-a", "--wait")["statusName"] == "Completed"

    def runs() -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = cli.json("graph-runs", "list", "--job", "names-a")["items"]
        return found

    wait_until(runs, 30, "the graph run")
    [graph] = runs()
    assert graph["rootJobDisplayName"] == "names-a"
    table = cli.ok("graph-runs", "list", "--job", "names-a").stdout
    assert "names-a" in table
    assert graph["rootJobId"] not in table  # the name stands where the id stood
    # the dashboard shows a graph run's first 12 digits
    prefix = graph["id"][:13] + "…"
    assert cli.json("graph-runs", "show", prefix)["id"] == graph["id"]


def test_ids_as_the_dashboard_shows_them(cli: Cli) -> None:
    job = cli.json("jobs", "create", "--type", "cli.ok", "--name", "Short ids", "--cron", FAR)
    run = cli.json("jobs", "trigger", "Short ids", "--wait")
    for ref in (shown(run["id"]), run["id"][-12:], "..." + run["id"][-12:].upper()):
        assert cli.json("runs", "show", ref)["id"] == run["id"]
    assert "cli ok attempt 1" in cli.ok("runs", "logs", shown(run["id"])).stdout
    # a job by the first or last digits of its id
    assert cli.json("jobs", "show", job["id"][:13] + "…")["id"] == job["id"]
    assert cli.json("jobs", "show", shown(job["id"]))["id"] == job["id"]
    # none: exit 4; not an id at all: exit 2; several: exit 1, naming them
    none = cli.run("runs", "show", "…ffffffffffff")
    assert none.exit_code == NOT_FOUND
    assert "no run id starts or ends with ffffffffffff" in none.stderr
    bad = cli.run("runs", "show", "…xyz")
    assert bad.exit_code == USAGE
    assert "not a run id" in bad.stderr
    other = cli.json("jobs", "trigger", "Short ids", "--wait")
    common = _common_prefix(run["id"], other["id"])
    several = cli.run("runs", "show", common + "…")
    assert several.exit_code == API_ERROR
    assert "give more" in several.stderr
    # failed records, by what `rota failed list` shows of them
    failing = cli.json("jobs", "create", "--type", "cli.fail", "--name", "Short fail")
    cli.run("jobs", "trigger", failing["id"], "--wait")
    wait_until(
        lambda: cli.json("failed", "list", "--job", failing["id"])["items"], 15, "the record"
    )
    record = cli.json("failed", "list", "--job", failing["id"])["items"][0]
    assert cli.json("failed", "show", shown(record["id"]))["id"] == record["id"]
    resolved = cli.json("failed", "resolve", shown(record["id"]), "--note", "seen")
    assert resolved["resolved"] is True


def _common_prefix(a: str, b: str) -> str:
    size = 0
    while a[size] == b[size]:
        size += 1
    # UUIDv7 made a second apart share their time's first digits: the first 8 turn over every
    # 65 s, so only the first 4 (every 49 days) are sure; 4 is what the CLI accepts
    assert size >= 4
    return a[:size]
