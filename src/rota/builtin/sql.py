"""``sql.execute``: one statement with named parameters (``:name``) on a connection an Admin
named in ``ROTA_SQL__CONNECTIONS``; job data names the connection, never a URL. The statement
runs in its own transaction (committed when it succeeds) under a statement timeout; the result
is the rows it returned (the first ``maxRows``) or the rows it affected.

PostgreSQL (asyncpg) and SQLite (aiosqlite) URLs are understood as the store's are
(``postgresql://…``, ``sqlite:///path``); another SQLAlchemy async URL with its driver
(``dialect+driver://…``) is used as written, if its driver is installed."""

from __future__ import annotations

import asyncio
import base64
import re
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import date, datetime, time
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from uuid import UUID

from pydantic import ConfigDict, Field, JsonValue, field_validator
from pydantic.alias_generators import to_camel

from rota.builtin.config import SqlSettings
from rota.core.errors import PermanentError, RotaError
from rota.sdk.job import JobContext, JobData, JobDefinition, job

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

__all__ = ["SqlExecute", "definitions"]

JOB_TYPE = "sql.execute"
_PARAM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
Scalar = str | int | float | bool | None


class SqlExecute(JobData):
    """The job data of ``sql.execute``."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    connection: str = Field(
        min_length=1, max_length=100, description="A connection name from the settings."
    )
    statement: str = Field(min_length=1, description="One SQL statement; parameters as :name.")
    parameters: dict[str, Scalar] = Field(default_factory=dict)
    max_rows: int | None = Field(
        None, ge=1, description="Rows returned at most (default and cap: ROTA_SQL__MAX_ROWS)."
    )
    timeout_seconds: float | None = Field(
        None, gt=0, description="Statement timeout (cap: ROTA_SQL__STATEMENT_TIMEOUT_SECONDS)."
    )

    @field_validator("parameters")
    @classmethod
    def _names(cls, value: dict[str, Scalar]) -> dict[str, Scalar]:
        for name in value:
            if not _PARAM_NAME.match(name):
                raise ValueError(f"parameter name {name[:40]!r}: letters, digits and _")
        return value


def engine_url(url: str) -> str:
    """An async SQLAlchemy URL: the default async driver for postgresql:// and sqlite://."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise PermanentError("a connection URL has a scheme (postgresql://, sqlite:///)")
    if scheme in ("postgresql", "postgres"):
        return f"postgresql+asyncpg://{rest}"
    if scheme == "sqlite":
        return f"sqlite+aiosqlite://{rest}"
    return url


def jsonable(value: object) -> JsonValue:
    """A column value as JSON: numbers, strings, booleans as they are; dates ISO 8601;
    decimals and UUIDs as strings; bytes base64; anything else ``str``."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, Decimal | UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    return str(value)


class SqlRunner:
    """Runs statements on the named connections of :class:`SqlSettings`. Each run opens its own
    connection (no pool outlives the job)."""

    def __init__(self, settings: SqlSettings) -> None:
        self.settings = settings

    def _check(self, data: SqlExecute) -> tuple[str, int, float]:
        s = self.settings
        url = s.connections.get(data.connection)
        if url is None:
            known = ", ".join(sorted(s.connections)) or "none"
            raise PermanentError(
                f"unknown SQL connection {data.connection!r} (configured: {known}; "
                "an Admin adds them with ROTA_SQL__CONNECTIONS)"
            )
        if len(data.statement) > s.max_statement_length:
            raise PermanentError(
                f"the statement has {len(data.statement)} characters, over the limit of "
                f"{s.max_statement_length} (ROTA_SQL__MAX_STATEMENT_LENGTH)"
            )
        if len(data.parameters) > s.max_parameters:
            raise PermanentError(
                f"{len(data.parameters)} parameters, over the limit of {s.max_parameters}"
            )
        max_rows = min(data.max_rows or s.max_rows, s.max_rows)
        timeout = min(data.timeout_seconds or s.statement_timeout_seconds,
                      s.statement_timeout_seconds)  # fmt: skip
        return url.get_secret_value(), max_rows, timeout

    async def execute(self, data: SqlExecute, log: Any) -> dict[str, JsonValue]:
        url, max_rows, timeout = self._check(data)
        try:
            result = await self._execute(url, data, max_rows, timeout)
        except RotaError as exc:  # never the connection's URL (its password) in a message
            raise type(exc)(exc.message.replace(url, "<connection URL>")) from None
        log.info(
            "%s on %s: %s", JOB_TYPE, data.connection,
            f"{result['rowCount']} rows" if "rows" in result else
            f"{result['rowsAffected']} rows affected",
        )  # fmt: skip
        return result

    async def _execute(
        self, url: str, data: SqlExecute, max_rows: int, seconds: float
    ) -> dict[str, JsonValue]:
        from sqlalchemy.exc import DBAPIError, SQLAlchemyError
        from sqlalchemy.ext.asyncio import create_async_engine
        from sqlalchemy.pool import NullPool

        try:
            engine = create_async_engine(engine_url(url), poolclass=NullPool)
        except (SQLAlchemyError, ImportError, ValueError) as exc:
            raise PermanentError(f"connection {data.connection!r}: {exc}") from None
        try:
            result = await self._run(engine, data, max_rows, seconds)
        except DBAPIError as exc:
            if exc.connection_invalidated or _is_connect_error(exc):
                raise RotaError(f"connection {data.connection!r}: {exc.orig}") from None
            raise PermanentError(f"the statement failed: {_first_line(exc.orig)}") from None
        except SQLAlchemyError as exc:
            raise PermanentError(f"the statement failed: {_first_line(exc)}") from None
        except OSError as exc:  # the server cannot be reached: worth a retry
            raise RotaError(f"connection {data.connection!r}: {exc}") from None
        except Exception as exc:
            if not _is_driver_error(exc):
                raise
            # a driver's own error SQLAlchemy did not wrap (asyncpg's while streaming rows)
            raise PermanentError(f"the statement failed: {_first_line(exc)}") from None
        finally:
            await engine.dispose()
        return result

    async def _run(
        self, engine: AsyncEngine, data: SqlExecute, max_rows: int, seconds: float
    ) -> dict[str, JsonValue]:
        from sqlalchemy import text

        async with engine.connect() as conn:
            postgres = conn.dialect.name == "postgresql"
            stream = await _returns_rows(conn, data.statement) if postgres else True
            async with conn.begin():
                if postgres:  # enforced by the server, whatever the client does
                    ms = max(1, int(seconds * 1000))
                    await conn.execute(text(f"SET LOCAL statement_timeout = {ms}"))
                guard = (
                    asyncio.timeout(seconds + 1.0) if postgres else _interrupt_after(conn, seconds)
                )
                try:
                    async with guard:
                        return await conn.run_sync(_execute, data, max_rows, stream)
                except TimeoutError:
                    raise PermanentError(
                        f"the statement ran longer than its timeout of {seconds} s"
                    ) from None


@asynccontextmanager
async def _interrupt_after(conn: AsyncConnection, seconds: float) -> AsyncIterator[None]:
    """SQLite: interrupt the statement running in aiosqlite's thread after ``seconds`` (a
    cancelled await would leave it running, and the connection's close waiting for it);
    ``TimeoutError`` when that is why it failed."""
    from sqlalchemy.exc import DBAPIError

    raw = await conn.get_raw_connection()
    interrupt = getattr(raw.driver_connection, "interrupt", None)
    fired = asyncio.Event()

    async def watchdog() -> None:
        await asyncio.sleep(seconds)
        fired.set()
        if interrupt is not None:
            await interrupt()

    task = asyncio.create_task(watchdog())
    try:
        yield
    except DBAPIError:
        if fired.is_set():
            raise TimeoutError from None
        raise
    finally:
        task.cancel()


async def _returns_rows(conn: AsyncConnection, statement: str) -> bool:
    """PostgreSQL: whether the statement returns rows, from the server's description of it
    (prepared outside the transaction): asyncpg streams rows through a cursor, which would
    lose the count of rows an UPDATE affected."""
    from sqlalchemy import text

    compiled = str(text(statement).compile(dialect=conn.dialect))
    raw = await conn.get_raw_connection()
    try:
        prepared = await raw.driver_connection.prepare(compiled)  # type: ignore[union-attr]
    except Exception as exc:  # asyncpg's errors: a bad statement, no such table, …
        if isinstance(exc, OSError):
            raise
        raise PermanentError(f"the statement failed: {_first_line(exc)}") from None
    return bool(prepared.get_attributes())


def _execute(
    conn: Connection, data: SqlExecute, max_rows: int, stream: bool
) -> dict[str, JsonValue]:
    """Run the statement (rows streamed: only the first ``max_rows`` + 1 are fetched)."""
    from sqlalchemy import text

    streamed = conn.execution_options(stream_results=True) if stream else conn
    result = streamed.execute(text(data.statement), data.parameters)
    try:
        if not result.returns_rows:
            return {"rowsAffected": result.rowcount}
        columns: list[JsonValue] = list(result.keys())
        fetched = result.fetchmany(max_rows + 1)
    finally:
        result.close()
    rows: list[JsonValue] = [[jsonable(v) for v in row] for row in fetched[:max_rows]]
    truncated = len(fetched) > max_rows
    return {"columns": columns, "rows": rows, "rowCount": len(rows), "truncated": truncated}


def _is_connect_error(exc: Exception) -> bool:
    orig = getattr(exc, "orig", None)
    return isinstance(orig, OSError | ConnectionError)


def _is_driver_error(exc: Exception) -> bool:
    return type(exc).__module__.split(".")[0] in ("asyncpg", "sqlite3", "aiosqlite")


def _first_line(exc: object) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def definitions(settings: SqlSettings) -> list[JobDefinition[..., Any]]:
    """The ``sql.execute`` job type, bound to ``settings``."""
    runner = SqlRunner(settings)

    @job(JOB_TYPE, max_retries=0)
    async def sql_execute(ctx: JobContext, data: SqlExecute) -> dict[str, JsonValue]:
        """Run one statement on a named connection; rows or rows affected are the result."""
        return await runner.execute(data, ctx.log)

    return [sql_execute]
