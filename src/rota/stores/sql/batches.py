"""Hot batch writes: statements compiled once per store and run with driver-level parameters
(PostgreSQL: one execution per batch of the statement's ``unnest`` form)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from operator import itemgetter
from typing import Any, Protocol, TypeVar
from uuid import UUID

from sqlalchemy import JSON, String, Table, Uuid, bindparam, column, func, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.dml import Insert, Update, UpdateBase
from sqlalchemy.sql.elements import ColumnElement

from rota.core.errors import ConflictError
from rota.stores.schema import UtcDateTime, aware_utc, utc_text
from rota.stores.sql import driver
from rota.stores.sql.engine import _json_dumps

# --- hot statements ---------------------------------------------------------------------------


class HotStatement(Protocol):
    """A hot statement's builder: its form run once per row (``unnest=False``: SQLite, and
    PostgreSQL for a lone row), and PostgreSQL's form run once per batch (``unnest=True``:
    the rows read from ``unnest`` over one array per parameter, named as the row's)."""

    def __call__(self, *, unnest: bool = False) -> UpdateBase: ...


def hot_params(types: Mapping[str, Any], *, unnest: bool = False) -> dict[str, ColumnElement[Any]]:
    """A hot statement's parameters by name: a typed bound parameter each, or (``unnest``)
    the columns of ``unnest(:name::type[], …) AS v(name, …)``, one array parameter each."""
    if not unnest:
        return {name: bindparam(name, type_=type_) for name, type_ in types.items()}
    arrays = [bindparam(name, type_=ARRAY(_element(type_))) for name, type_ in types.items()]
    rows = func.unnest(*arrays).table_valued(*(column(n, t) for n, t in types.items()))
    v = rows.render_derived("v")
    return {name: v.c[name] for name in types}


def _element(type_: Any) -> Any:
    """An array parameter's element type: a string's without its length (a cast to
    ``VARCHAR(n)`` would cut a longer value short, which the column refuses)."""
    return String() if isinstance(type_, String) and type_.length is not None else type_


_I = TypeVar("_I", bound=Insert)


def insert_values(
    stmt: _I, params: Mapping[str, ColumnElement[Any]], *, unnest: bool = False
) -> _I:
    """``INSERT … VALUES (params)``, or (``unnest``) ``INSERT … SELECT params FROM unnest``."""
    if unnest:
        return stmt.from_select(list(params), select(*params.values()))
    return stmt.values(params)


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
class _Batch:
    """PostgreSQL: a statement's ``unnest`` form, run once for a whole batch."""

    sql: str
    order: tuple[int, ...]
    """For each of its array parameters, the position of its column in the row's parameters."""
    keys: tuple[int, ...]
    """Positions of an UPDATE's key parameters: the form is used only when no two rows
    share them (``UPDATE … FROM`` would apply just one of them)."""


@dataclass(frozen=True, slots=True)
class _Prepared:
    sql: str
    values: Callable[[dict[str, Any]], Any]
    """A row's parameters in statement order (``operator.itemgetter``)."""
    single: bool
    """One parameter: ``values`` returns it bare, not in a tuple."""
    converters: tuple[tuple[int, _Converter], ...]
    """Positions whose value the driver needs converted."""
    names: tuple[str, ...]
    """The parameters' names in statement order."""
    repeated: frozenset[int] = frozenset()
    """Positions whose values a batch often repeats (SQLite's datetimes: the fire time, the
    creation time of a burst): each distinct one converted once per batch."""
    batch: _Batch | None = None


class _FastBatches:
    """``executemany`` of hot statements with driver-level parameters.

    On batches of thousands of rows SQLAlchemy's per-row parameter processing costs more than
    the database's work. These statements are compiled once per store; their parameters are
    converted here exactly as the column types convert them (UUIDs: hex text in SQLite; UTC
    datetimes: naive ISO text in SQLite; JSON: text) and handed to the driver as tuples (on
    PostgreSQL, for a batch, as one array per parameter to the statement's ``unnest`` form).
    Every parameter of such a statement must be a named ``bindparam`` with a type.
    """

    def __init__(self, dialect: str) -> None:
        sqlite = self._sqlite = dialect == "sqlite"
        self._uuid: _Converter | None = _uuid_hex if sqlite else None
        self._datetime: _Converter = _sqlite_datetime if sqlite else _aware
        self._prepared: dict[str, _Prepared] = {}

    async def execute(
        self,
        conn: AsyncConnection,
        key: str,
        make: HotStatement,
        rows: Sequence[dict[str, Any]],
        *,
        keys: Sequence[str] = (),
    ) -> int:
        """Run the statement ``make()`` (cached under ``key``) once per row, or on PostgreSQL
        its ``make(unnest=True)`` once for all; returns the driver's row count (``-1`` when
        it reports none). An UPDATE names its key parameters (``keys``): a batch in which
        two rows share them runs row by row."""
        prepared = self._prepared_for(key, make, conn.dialect, keys=keys)
        params = self._params(prepared, rows)
        batch = prepared.batch
        if batch is not None and len(params) > 1:
            columns = list(zip(*params, strict=True))
            if _distinct(columns, batch.keys):
                arrays = tuple(list(columns[i]) for i in batch.order)
                result = await conn.exec_driver_sql(batch.sql, arrays)
                return int(result.rowcount)
        return await self._run(conn, prepared.sql, params)

    async def execute_records(
        self,
        conn: AsyncConnection,
        key: str,
        make: HotStatement,
        names: Sequence[str],
        records: Sequence[tuple[Any, ...]],
    ) -> int:
        """Run ``make()`` once per record, each already as the driver takes it, in the order
        ``names`` (which must be the statement's)."""
        prepared = self._prepared_for(key, make, conn.dialect, names=names)
        return await self._run(conn, prepared.sql, list(records))

    async def _run(self, conn: AsyncConnection, sql: str, params: list[Any]) -> int:
        """``executemany``: on SQLite in one call to its thread (:mod:`.driver`)."""
        if self._sqlite:
            return await driver.run(conn, sql, params, many=True)
        result = await conn.exec_driver_sql(sql, params)
        return int(result.rowcount)

    def sqlite_rows(
        self, key: str, make: HotStatement, dialect: Dialect, rows: Sequence[dict[str, Any]]
    ) -> tuple[str, list[tuple[Any, ...]]]:
        """SQLite: the statement ``make()`` (cached under ``key``, as :meth:`execute` caches
        it) and its parameters for each row, for ``executemany`` on a connection of the
        caller's (:mod:`.hotwriter`)."""
        prepared = self._prepared_for(key, make, dialect)
        return prepared.sql, self._params(prepared, rows)

    def _prepared_for(
        self,
        key: str,
        make: HotStatement,
        dialect: Dialect,
        *,
        names: Sequence[str] | None = None,
        keys: Sequence[str] = (),
    ) -> _Prepared:
        """The statement ``make()`` compiled once per store (under ``key``), with its
        ``unnest`` form on PostgreSQL unless ``names`` are given; with ``names``, checked
        once to take its parameters in that order."""
        prepared = self._prepared.get(key)
        if prepared is None:
            prepared = self._prepare(make(), dialect)
            if names is not None and prepared.names != tuple(names):
                raise RuntimeError(f"{key}: the records' order is not the statement's")
            if names is None and dialect.name == "postgresql":
                batch = self._prepare_batch(make(unnest=True), dialect, prepared.names, keys)
                prepared = replace(prepared, batch=batch)
            self._prepared[key] = prepared
        return prepared

    def _prepare_batch(
        self, stmt: UpdateBase, dialect: Dialect, names: tuple[str, ...], keys: Sequence[str]
    ) -> _Batch:
        """The ``unnest`` form ``stmt`` of a statement whose row parameters are ``names``."""
        if isinstance(stmt, Update) and not keys:
            raise TypeError("a hot UPDATE names its key parameters")
        compiled = stmt.compile(dialect=dialect)
        arrays = tuple(compiled.positiontup or ())
        if sorted(arrays) != sorted(names):
            raise TypeError(f"the unnest form takes {arrays}, the row statement {names}")
        return _Batch(
            compiled.string,
            tuple(names.index(name) for name in arrays),
            tuple(names.index(name) for name in keys),
        )

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
        repeated = prepared.repeated
        texts: dict[Any, Any] = {}  # a batch's repeated values converted once (its fire time)
        for row in rows:
            params = list(values(row))
            for index, conv in converters:
                value = params[index]
                if index in repeated:
                    text = texts.get(value)
                    if text is None:
                        text = texts[value] = conv(value)
                    params[index] = text
                else:
                    params[index] = conv(value)
            out.append(tuple(params))
        return out

    def _prepare(self, stmt: UpdateBase, dialect: Dialect) -> _Prepared:
        compiled = stmt.compile(dialect=dialect)
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
        return _Prepared(
            compiled.string,
            itemgetter(*names),
            len(names) == 1,
            tuple(converters),
            tuple(names),
            frozenset(i for i, conv in converters if conv is _sqlite_datetime),
        )

    def _converter(self, type_: Any) -> _Converter | None:
        if isinstance(type_, UtcDateTime):
            return self._datetime
        if isinstance(type_, Uuid):
            return self._uuid
        if isinstance(type_, JSON):
            return _json_or_null
        return None


def _distinct(columns: Sequence[tuple[Any, ...]], keys: tuple[int, ...]) -> bool:
    """Whether no two rows share their values at ``keys`` (``columns``: the batch's
    parameters by position, one tuple of every row's value each)."""
    if not keys:
        return True
    rows = len(columns[0])
    if len(keys) == 1:
        return len(set(columns[keys[0]])) == rows
    return len(set(zip(*(columns[i] for i in keys), strict=True))) == rows


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
