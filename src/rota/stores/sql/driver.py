"""SQLite's hot statements in one call to the driver's thread each.

aiosqlite runs every call on the connection's own thread and hands the answer back to the
event loop. SQLAlchemy's adapter makes three or four such calls per statement (a cursor, the
statement, its rows, the cursor's close), and each waits for the loop's next turn, which under
load is milliseconds; meanwhile SQLite's one writer is held. The statements of the hot batches
(a dispatch's fires, a status batch's completions, the fast batches) go to the driver
connection (``AsyncConnection.get_raw_connection().driver_connection``, an
``aiosqlite.Connection``) directly instead: one call each, in the same transaction.

Callers use the module's functions by their module (``driver.run``), so that a test can watch
what runs here as it watches SQLAlchemy's statements."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection


async def run(conn: AsyncConnection, sql: str, params: Any, *, many: bool = False) -> int:
    """Run ``sql`` once with ``params`` (a mapping or a tuple), or once per item of them
    (``many``); returns the row count the driver reports."""
    driver: Any = (await conn.get_raw_connection()).driver_connection
    cursor = await (driver.executemany(sql, params) if many else driver.execute(sql, params))
    return int(cursor.rowcount)


async def rows(conn: AsyncConnection, sql: str, params: Any) -> Sequence[Any]:
    """The rows ``sql`` answers, fetched in the same call."""
    driver: Any = (await conn.get_raw_connection()).driver_connection
    return list(await driver.execute_fetchall(sql, params))


async def value(conn: AsyncConnection, sql: str, params: Any) -> Any:
    """The one value of the one row ``sql`` answers (an aggregate's)."""
    (row,) = await rows(conn, sql, params)
    return row[0]
