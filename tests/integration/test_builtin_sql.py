"""``sql.execute`` on real databases: a SQLite file and a throwaway database on the machine's
PostgreSQL (fails, not skips, under CI when it is missing); named connections only, rows
capped, statement timeouts; end to end through the embedded runtime."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from rota.builtin.config import SqlSettings
from rota.builtin.sql import SqlExecute, SqlRunner
from rota.core.errors import PermanentError, RotaError, ValidationError
from rota.core.models import OccurrenceStatus
from tests.helpers import RuntimeFactory
from tests.integration.builtin_servers import run_job, wait_for_log
from tests.stores import pg_database, require_postgres

S = OccurrenceStatus
log = logging.getLogger("test")


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'reports.db'}"


@pytest.fixture(
    params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
)
def db_url(request: pytest.FixtureRequest, sqlite_url: str) -> Iterator[str]:
    if request.param == "sqlite":
        yield sqlite_url
        return
    require_postgres(request.getfixturevalue("pg_error"))
    with pg_database() as url:
        yield url


def runner(url: str, **settings: Any) -> SqlRunner:
    return SqlRunner(SqlSettings(connections={"reports": SecretStr(url)}, **settings))


async def execute(r: SqlRunner, statement: str, **data: Any) -> Any:
    job = SqlExecute.model_validate({"connection": "reports", "statement": statement, **data})
    return await r.execute(job, log)


async def test_statements_rows_and_parameters(db_url: str) -> None:
    r = runner(db_url, max_rows=3)
    created = await execute(r, "CREATE TABLE sales (id integer, region text, amount numeric)")
    assert "rowsAffected" in created
    for i in range(5):
        await execute(
            r,
            "INSERT INTO sales VALUES (:id, :region, :amount)",
            parameters={"id": i, "region": "north" if i % 2 else "south", "amount": 1.5 * i},
        )
    updated = await execute(
        r, "UPDATE sales SET amount = amount + 1 WHERE region = :r", parameters={"r": "north"}
    )
    assert updated == {"rowsAffected": 2}
    rows = await execute(r, "SELECT id, region FROM sales ORDER BY id")
    assert rows == {
        "columns": ["id", "region"],
        "rows": [[0, "south"], [1, "north"], [2, "south"]],
        "rowCount": 3,
        "truncated": True,
    }
    one = await execute(
        r, "SELECT count(*) AS n FROM sales WHERE id >= :low", parameters={"low": 3}, maxRows=1
    )
    assert one["rows"] == [[2]]
    assert one["truncated"] is False


async def test_unknown_connections_and_bad_statements_fail_for_good(db_url: str) -> None:
    r = runner(db_url)
    job = SqlExecute.model_validate({"connection": "billing", "statement": "SELECT 1"})
    with pytest.raises(PermanentError, match=r"unknown SQL connection 'billing'.*reports"):
        await r.execute(job, log)
    with pytest.raises(PermanentError, match="the statement failed"):
        await execute(r, "SELEKT 1")
    with pytest.raises(PermanentError, match="the statement failed"):
        await execute(r, "SELECT :missing")
    short = runner(db_url, max_statement_length=10)
    with pytest.raises(PermanentError, match="over the limit of 10"):
        await execute(short, "SELECT 1 + 1 + 1")


async def test_a_statement_over_its_timeout_is_stopped(db_url: str) -> None:
    r = runner(db_url, statement_timeout_seconds=0.5)
    if db_url.startswith("postgresql"):
        slow = "SELECT pg_sleep(5)"
    else:  # a long recursive count: SQLite has no sleep
        slow = (
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
            "SELECT count(*) FROM (SELECT x FROM c LIMIT 1000000000)"
        )
    with pytest.raises(PermanentError, match=r"timeout|cancel|interrupt"):
        await execute(r, slow, timeoutSeconds=5)  # the job cannot raise the Admin's cap
    assert (await execute(r, "SELECT 1 AS one"))["rows"] == [[1]]  # usable afterwards


async def test_end_to_end_through_the_embedded_runtime(
    runtime_factory: RuntimeFactory, sqlite_url: str
) -> None:
    rt = await runtime_factory(
        {"sql.connections": {"reports": SecretStr(sqlite_url)}}, ["rota.builtin.sql"]
    )
    created = await run_job(
        rt, "sql.execute", {"connection": "reports", "statement": "CREATE TABLE t (a int)"}
    )
    assert created.status is S.COMPLETED, created.exception
    inserted = await run_job(
        rt,
        "sql.execute",
        {"connection": "reports", "statement": "INSERT INTO t VALUES (:a)", "parameters": {"a": 7}},
    )
    assert inserted.result == {"rowsAffected": 1}
    selected = await run_job(
        rt, "sql.execute", {"connection": "reports", "statement": "SELECT a FROM t"}
    )
    assert selected.result["rows"] == [[7]]
    await wait_for_log(rt, selected, "1 rows")
    unknown = await run_job(
        rt, "sql.execute", {"connection": "nope", "statement": "SELECT 1"}, max_retries=2
    )
    assert unknown.status is S.FAILED
    assert unknown.attempt == 1
    assert "unknown SQL connection 'nope'" in (unknown.exception or "")
    # A URL in job data is refused by the server, against the job type's data schema (the
    # worker refuses it too: the model forbids extra fields).
    data = {"connection": "reports", "statement": "SELECT 1", "url": sqlite_url}
    with pytest.raises(ValidationError) as with_url:
        await rt.jobs.create_job({"job_type": "sql.execute", "job_data": data, **now(rt)})
    assert with_url.value.field == "jobData.url"


def now(rt: Any) -> dict[str, Any]:
    return {"execute_at": rt.jobs.now()}


async def test_a_connection_url_never_shows_in_a_failure(tmp_path: Path) -> None:
    secret = "postgresql://reporter:hunter2@127.0.0.1:1/reports"
    with pytest.raises(RotaError) as caught:
        await execute(runner(secret), "SELECT 1")
    assert "hunter2" not in str(caught.value)
    bad = "nosuchdialect://reporter:hunter2@host/db"
    with pytest.raises(PermanentError) as refused:
        await execute(runner(bad), "SELECT 1")
    assert "hunter2" not in str(refused.value)
