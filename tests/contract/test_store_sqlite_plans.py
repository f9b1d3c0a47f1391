"""SQLite's set-based hot statements start from the batch: each reads its JSON array once and
finds every job or occurrence by its id, whatever the tables hold and whether or not they were
analysed. A plan that starts from the table instead (say, from the Queued and Running by the
status index) probes the whole batch for each of its rows, and its cost grows with the
table: a contract test on a small table passes, a bench of 20,000 jobs runs at 200 a second."""

from __future__ import annotations

import pytest

from rota.core.models import OccurrenceStatus as S
from rota.stores.sql import SqlStore
from rota.stores.sql.completions import COMPLETE_RUNS_SQLITE, COMPLETED_BEFORE_SQLITE
from rota.stores.sql.firing import CLEAR_NEXT_SQLITE, FIRE_PLAIN_SQLITE, FIRED_SQLITE
from tests.contract.test_store import fired, make_job, status
from tests.contract.test_store_completions import T1

STATEMENTS = {
    "fire": FIRE_PLAIN_SQLITE,
    "fired": FIRED_SQLITE,
    "clear": CLEAR_NEXT_SQLITE,
    "before": COMPLETED_BEFORE_SQLITE,
    "complete": COMPLETE_RUNS_SQLITE,
}
PARAMS = {
    "jobs": "[]",
    "reports": "[]",
    "declared": "[]",
    "type_defaults": "[]",
    "horizon": "",
    "now": "",
    "late_before": "",
    "default_max_retries": 0,
    "sent": 0,
    "mark_skip": 0,
    "history": "[]",
}


async def _plans(store: SqlStore) -> dict[str, list[str]]:
    plans: dict[str, list[str]] = {}
    async with store._write() as conn:
        driver = (await conn.get_raw_connection()).driver_connection
        for name, statement in STATEMENTS.items():
            rows = await (
                await driver.execute(f"EXPLAIN QUERY PLAN {statement}", PARAMS)
            ).fetchall()
            plans[name] = [str(row[3]) for row in rows]
    return plans


@pytest.mark.parametrize("analysed", [False, True], ids=["as-run", "analysed"])
async def test_each_hot_statement_starts_from_its_batch_and_finds_rows_by_id(
    store: SqlStore, store_kind: str, analysed: bool
) -> None:
    if store_kind != "sqlite":
        pytest.skip("SQLite's plans")
    # a table where most runs are Queued or Running, as under load, and some have ended
    runs = [await fired(store, make_job()) for _ in range(40)]
    await store.apply_status([status(o, S.RUNNING, T1, instance_id="w-1") for o in runs[:20]])
    await store.apply_status([status(o, S.COMPLETED, T1, duration_ms=1.0) for o in runs[:5]])
    if analysed:
        # statistics of a large table in which the status index looks selective: what tempts
        # a planner to start from the table (a row count is the first figure of a stat)
        async with store._write() as conn:
            await conn.exec_driver_sql("ANALYZE")
            await conn.exec_driver_sql(
                "UPDATE sqlite_stat1 SET stat = '1000000' || substr(stat, instr(stat, ' ')) "
                "WHERE tbl IN ('occurrences', 'jobs') AND instr(stat, ' ') > 0"
            )
            await conn.exec_driver_sql("ANALYZE sqlite_schema")
    plans = await _plans(store)
    for name, plan in plans.items():
        shown = (name, plan)
        tables = [step for step in plan if "VIRTUAL TABLE" not in step and "SUBQUERY" not in step]
        # the batch is the outer loop (or a list read once): the first table step is a
        # look-up by id, and no table is scanned
        assert "(id=?)" in tables[0], shown
        assert not any(step.startswith("SCAN") for step in tables), shown
