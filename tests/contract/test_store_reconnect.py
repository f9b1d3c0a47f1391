"""The PostgreSQL store after its server connections are dropped (as by a restart of
PostgreSQL, without stopping the shared server): the pooled connections are not pinged before
each use, so the first transaction on a dropped one fails as ``BackendUnavailableError``; that
failure discards the whole pool, and every transaction after it works on new connections."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import asyncpg
import pytest

from rota.core.errors import BackendUnavailableError
from rota.core.ports import Store
from tests.stores import PG_ADMIN_URL

pytestmark = [pytest.mark.postgres, pytest.mark.parametrize("store_kind", ["postgres"])]

T0 = datetime(2026, 11, 29, 12, tzinfo=UTC)


def _database(url: str) -> str:
    return url.rsplit("/", 1)[1]


async def _backends(database: str) -> int:
    conn = await asyncpg.connect(PG_ADMIN_URL, timeout=5)
    try:
        count: int = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", database
        )
    finally:
        await conn.close()
    return count


async def _terminate(database: str) -> int:
    """End every server process of ``database``, waiting (up to 5 s each) until it is gone;
    returns how many ended."""
    conn = await asyncpg.connect(PG_ADMIN_URL, timeout=5)
    try:
        ended: int = await conn.fetchval(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000))"
            " FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
            database,
        )
    finally:
        await conn.close()
    return ended


async def test_store_recovers_after_its_connections_are_killed(
    store: Store, store_url: str
) -> None:
    database = _database(store_url)
    # Several reads at once: the pool holds several connections, all of them to be dropped.
    await asyncio.gather(*(store.ping() for _ in range(4)))
    await store.record_job_types([("before", "default")], T0)
    pooled = await _backends(database)
    assert pooled >= 2

    assert await _terminate(database) == pooled
    assert await _backends(database) == 0

    # The first transaction meets a dropped connection: it fails, as the store's error.
    with pytest.raises(BackendUnavailableError):
        await store.declared_job_types()
    # The failure discarded the pool: every connection after it is new, reads and writes work,
    # several at once (none of the other dropped connections is handed out again).
    await asyncio.gather(*(store.ping() for _ in range(4)))
    assert await store.record_job_types([("after", "default")], T0) == 1
    assert await store.declared_job_types() == {("before", "default"), ("after", "default")}


async def test_a_series_of_writes_loses_one_transaction(store: Store, store_url: str) -> None:
    """The write path (a transaction begun at once): of a series of writes after the drop,
    only the first fails."""
    database = _database(store_url)
    await store.record_job_types([("one", "default")], T0)
    await _terminate(database)
    failures = 0
    for n in range(3):
        try:
            await store.record_job_types([(f"type-{n}", "default")], T0)
        except BackendUnavailableError:
            failures += 1
    assert failures == 1
    assert {name for name, _ in await store.declared_job_types()} == {
        "one",
        "type-1",
        "type-2",
    }
