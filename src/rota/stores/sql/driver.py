"""SQLite's hot statements in one call to the driver's thread each.

aiosqlite runs every call on the connection's own thread and hands the answer back to the
event loop. SQLAlchemy's adapter makes three or four such calls per statement (a cursor, the
statement, its rows, the cursor's close), and each waits for the loop's next turn, which under
load is milliseconds; meanwhile SQLite's one writer is held. The fast batches' statements go
to the driver connection (``AsyncConnection.get_raw_connection().driver_connection``, an
``aiosqlite.Connection``) directly instead: one call each, in the same transaction. (The
hottest transactions, a dispatch's plain fires and a status batch's completions, are one call
each to a thread of their own: :mod:`.hotwriter`.)

Callers use the module's functions by their module (``driver.run``), so that a test can watch
what runs here as it watches SQLAlchemy's statements."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection


async def run(conn: AsyncConnection, sql: str, params: Any, *, many: bool = False) -> int:
    """Run ``sql`` once with ``params`` (a mapping or a tuple), or once per item of them
    (``many``); returns the row count the driver reports."""
    driver: Any = (await conn.get_raw_connection()).driver_connection
    cursor = await (driver.executemany(sql, params) if many else driver.execute(sql, params))
    return int(cursor.rowcount)
