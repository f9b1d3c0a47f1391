"""Hot batch writes: statements compiled once per store and run with driver-level parameters
(PostgreSQL: one ``unnest`` execution per batch where the statement's shape allows)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from operator import itemgetter
from typing import Any
from uuid import UUID

from sqlalchemy import JSON, Table, Uuid
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.dml import UpdateBase

from rota.core.errors import ConflictError
from rota.stores.schema import UtcDateTime, aware_utc, utc_text
from rota.stores.sql.engine import _json_dumps

# --- hot batch writes -------------------------------------------------------------------------


def _uuid_hex(value: UUID | None) -> str | None:
    return None if value is None else value.hex


def _sqlite_datetime(value: datetime | None) -> str | None:
    return None if value is None else utc_text(value)


def _aware(value: datetime | None) -> datetime | None:
    return None if value is None else aware_utc(value)


def _json_or_null(value: Any) -> str | None:
    return None if value is None else _json_dumps(value)


_Converter = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class _Prepared:
    sql: str
    values: Callable[[dict[str, Any]], Any]
    """A row's parameters in statement order (``operator.itemgetter``)."""
    single: bool
    """One parameter: ``values`` returns it bare, not in a tuple."""
    converters: tuple[tuple[int, _Converter], ...]
    """Positions whose value the driver needs converted."""
    columnar: str | None = None
    """PostgreSQL: the same statement over ``unnest`` of one array per parameter (one
    execution for the whole batch instead of one per row)."""
    keys: tuple[int, ...] = ()
    """Positions of the parameters in an UPDATE's WHERE clause: the columnar form is used
    only when no two rows share them (``UPDATE … FROM`` would apply just one of them)."""
    names: tuple[str, ...] = ()
    """The parameters' names in statement order."""


_CAST = re.compile(r"\$(\d+)::(TIMESTAMP WITH TIME ZONE|DOUBLE PRECISION|[A-Z]+)")


def _columnar(sql: str) -> tuple[str, tuple[int, ...]] | None:
    """The ``unnest`` form of a compiled PostgreSQL INSERT … VALUES or UPDATE … WHERE whose
    parameters are all ``$n::TYPE``, and the positions of an UPDATE's key parameters;
    ``None`` for any other shape."""
    types: dict[int, str] = {}
    for number, type_ in _CAST.findall(sql):
        types.setdefault(int(number), type_)
    if not types or sorted(types) != list(range(1, len(types) + 1)):
        return None
    arrays = ", ".join(f"${n}::{types[n]}[]" for n in sorted(types))
    if sql.startswith("INSERT INTO "):
        head, sep, rest = sql.partition(" VALUES (")
        values, close, tail = rest.partition(")")
        if not sep or not close or _CAST.sub("", values).strip(", ") != "":
            return None
        tail = tail.split(" RETURNING ", 1)[0]
        return f"{head} SELECT * FROM unnest({arrays}){tail}", ()
    if sql.startswith("UPDATE "):
        sets, sep, where = sql.partition(" WHERE ")
        if not sep:
            return None
        names = ", ".join(f"p{n}" for n in sorted(types))
        keys = tuple(sorted({int(n) - 1 for n, _ in _CAST.findall(where)}))

        def column(match: re.Match[str]) -> str:
            return f"v.p{match[1]}"

        body = f"{_CAST.sub(column, sets)} FROM unnest({arrays}) AS v({names})"
        return f"{body} WHERE {_CAST.sub(column, where)}", keys
    return None


class _FastBatches:
    """``executemany`` of hot statements with driver-level parameters.

    On batches of thousands of rows SQLAlchemy's per-row parameter processing costs more than
    the database's work. These statements are compiled once per store; their parameters are
    converted here exactly as the column types convert them (UUIDs: hex text in SQLite; UTC
    datetimes: naive ISO text in SQLite; JSON: text) and handed to the driver as tuples.
    Every parameter of such a statement must be a named ``bindparam`` with a type.
    """

    def __init__(self, dialect: str) -> None:
        sqlite = dialect == "sqlite"
        self._uuid: _Converter | None = _uuid_hex if sqlite else None
        self._datetime: _Converter = _sqlite_datetime if sqlite else _aware
        self._prepared: dict[str, _Prepared] = {}

    async def execute(
        self,
        conn: AsyncConnection,
        key: str,
        make: Callable[[], UpdateBase],
        rows: Sequence[dict[str, Any]],
    ) -> int:
        """Run the statement ``make()`` (cached under ``key``) once per row; returns the
        driver's row count (``-1`` when it reports none)."""
        prepared = self._prepared_for(key, make, conn)
        params = self._params(prepared, rows)
        if prepared.columnar is not None and len(params) > 1 and _distinct(params, prepared.keys):
            arrays = tuple(list(column) for column in zip(*params, strict=True))
            result = await conn.exec_driver_sql(prepared.columnar, arrays)
        else:
            result = await conn.exec_driver_sql(prepared.sql, params)
        return int(result.rowcount)

    async def execute_records(
        self,
        conn: AsyncConnection,
        key: str,
        make: Callable[[], UpdateBase],
        names: Sequence[str],
        records: Sequence[tuple[Any, ...]],
    ) -> int:
        """As :meth:`execute`, with each row's parameters already as the driver takes them,
        in the order ``names`` (which must be the statement's)."""
        prepared = self._prepared_for(key, make, conn, names)
        result = await conn.exec_driver_sql(prepared.sql, list(records))
        return int(result.rowcount)

    def _prepared_for(
        self,
        key: str,
        make: Callable[[], UpdateBase],
        conn: AsyncConnection,
        names: Sequence[str] | None = None,
    ) -> _Prepared:
        """The statement ``make()`` compiled once per store (under ``key``); with ``names``,
        checked once to take its parameters in that order."""
        prepared = self._prepared.get(key)
        if prepared is None:
            prepared = self._prepare(make(), conn)
            if names is not None and prepared.names != tuple(names):
                raise RuntimeError(f"{key}: the records' order is not the statement's")
            self._prepared[key] = prepared
        return prepared

    @staticmethod
    def _params(prepared: _Prepared, rows: Sequence[dict[str, Any]]) -> list[tuple[Any, ...]]:
        values = prepared.values
        if prepared.single:
            conv = prepared.converters[0][1] if prepared.converters else None
            return [(values(r) if conv is None else conv(values(r)),) for r in rows]
        if not prepared.converters:
            return [values(r) for r in rows]
        out: list[tuple[Any, ...]] = []
        converters = prepared.converters
        for row in rows:
            params = list(values(row))
            for index, conv in converters:
                params[index] = conv(params[index])
            out.append(tuple(params))
        return out

    def _prepare(self, stmt: UpdateBase, conn: AsyncConnection) -> _Prepared:
        compiled = stmt.compile(dialect=conn.dialect)
        names = compiled.positiontup
        if not names:
            raise TypeError("fast batches need a positional paramstyle and parameters")
        converters: list[tuple[int, _Converter]] = []
        for index, name in enumerate(names):
            bind = compiled.binds[name]
            if not bind.required:
                raise TypeError(f"parameter {name} of a fast batch has a fixed value")
            conv = self._converter(bind.type)
            if conv is not None:
                converters.append((index, conv))
        columnar = _columnar(compiled.string) if conn.dialect.name == "postgresql" else None
        return _Prepared(
            compiled.string,
            itemgetter(*names),
            len(names) == 1,
            tuple(converters),
            None if columnar is None else columnar[0],
            () if columnar is None else columnar[1],
            tuple(names),
        )

    def _converter(self, type_: Any) -> _Converter | None:
        if isinstance(type_, UtcDateTime):
            return self._datetime
        if isinstance(type_, Uuid):
            return self._uuid
        if isinstance(type_, JSON):
            return _json_or_null
        return None


def _distinct(params: Sequence[tuple[Any, ...]], keys: tuple[int, ...]) -> bool:
    """Whether no two rows share their values at ``keys``."""
    if not keys:
        return True
    if len(keys) == 1:
        key = keys[0]
        return len({row[key] for row in params}) == len(params)
    return len({tuple(row[i] for i in keys) for row in params}) == len(params)


async def copy_records(conn: AsyncConnection, table: Table, records: Sequence[Any]) -> None:
    """PostgreSQL: ``records`` (each the values of every column of ``table``, in the
    table's column order, as the column types take them: a JSON column's as its text)
    written by ``COPY … FROM STDIN`` in binary (asyncpg's ``copy_records_to_table``): the
    cheapest way in for a bulk of new rows, for the server (no statement, no arrays to
    unpack) and for the client (one encoding per value).

    It runs on the transaction's connection; on its own it is atomic (all rows or none)."""
    from asyncpg.exceptions import IntegrityConstraintViolationError

    raw = await conn.get_raw_connection()
    driver: Any = raw.driver_connection
    columns = [c.name for c in table.columns]
    try:
        await driver.copy_records_to_table(table.name, records=records, columns=columns)
    except IntegrityConstraintViolationError as exc:  # as guard_errors does for statements
        raise ConflictError(f"conflicts with stored data: {exc}") from exc
