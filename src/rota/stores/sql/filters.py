"""The conditions of the lists' query filter (:mod:`rota.core.query`): job types, jobs by
name or id, tags, worker groups, attempts and job data fields, for occurrences, failed
occurrences and jobs.

Indexes: the lists walk their rows newest first (by id) and stop at a page; a job or tag
condition becomes a set of job ids (read from ``jobs`` / ``job_tags``), which the
``(job_id, id)`` indexes serve. A job type, worker, attempt or data condition is tested on
each row walked: fast when many rows match, a scan of the table when none do (say so in the
docs). Data fields are read as text (PostgreSQL ``#>>`` with the path as a bound ``text[]``,
SQLite ``json_extract`` with the path as a bound string); field names are checked by the
parser (letters, digits, ``_``, ``-``) and never written into the SQL.
"""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from sqlalchemy import (
    ColumnElement,
    Text,
    and_,
    bindparam,
    case,
    cast,
    false,
    func,
    literal_column,
    or_,
    select,
    type_coerce,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.types import TypeEngine

from rota.core.errors import ValidationError
from rota.core.records import DataFilter
from rota.stores.schema import UNTAGGED, job_tags, jobs


def split_refs(refs: Sequence[str]) -> tuple[list[str], list[UUID]]:
    """Job references as display names and ids (a reference that reads as a UUID is both:
    a job may be named like one)."""
    ids: list[UUID] = []
    for ref in refs:
        try:
            ids.append(UUID(ref))
        except ValueError:
            continue
    return list(refs), ids


def named_jobs(refs: Sequence[str]) -> ColumnElement[bool]:
    """The jobs ``refs`` name (condition on ``jobs``)."""
    names, ids = split_refs(refs)
    found = jobs.c.display_name.in_(names)
    return or_(found, jobs.c.id.in_(ids)) if ids else found


def of_jobs(key: ColumnElement[object], refs: Sequence[str]) -> ColumnElement[bool]:
    """Rows whose job id (``key``) is one of the jobs ``refs`` name."""
    return key.in_(select(jobs.c.id).where(named_jobs(refs)))


def tagged(dialect: str, tags: Sequence[str]) -> ColumnElement[bool]:
    """The jobs holding any of ``tags`` (condition on ``jobs``)."""
    if dialect == "postgresql":  # the tags column's GIN index, of the jobs with tags
        column = type_coerce(jobs.c.tags, postgresql.JSONB)
        return and_(or_(*(column.contains([t]) for t in tags)), column != literal_column(UNTAGGED))
    return jobs.c.id.in_(select(job_tags.c.job_id).where(job_tags.c.tag.in_(list(tags))))


def of_tags(dialect: str, key: ColumnElement[object], tags: Sequence[str]) -> ColumnElement[bool]:
    """Rows whose job id (``key``) is a job holding any of ``tags``."""
    if dialect == "postgresql":
        return key.in_(select(jobs.c.id).where(tagged(dialect, tags)))
    return key.in_(select(job_tags.c.job_id).where(job_tags.c.tag.in_(list(tags))))


def of_workers(key: ColumnElement[object], workers: Sequence[str]) -> ColumnElement[bool]:
    """Rows whose job id (``key``) is a job of any of the worker groups."""
    return key.in_(select(jobs.c.id).where(jobs.c.worker_id.in_(list(workers))))


def in_range(
    column: ColumnElement[int], low: int | None, high: int | None
) -> list[ColumnElement[bool]]:
    """``low <= column <= high`` (either bound may be missing)."""
    found: list[ColumnElement[bool]] = []
    if low is not None:
        found.append(column >= low)
    if high is not None:
        found.append(column <= high)
    return found


def data_text(
    dialect: str, column: ColumnElement[object], path: Sequence[str]
) -> ColumnElement[str]:
    """The job data field at ``path`` as text (``NULL`` when absent): a string as it is, a
    number as written, ``true``/``false``, an object or array as JSON."""
    if dialect == "postgresql":
        path_param = bindparam(None, list(path), type_=postgresql.ARRAY(Text))
        text_type: TypeEngine[str] = Text()
        return column.op("#>>", return_type=text_type)(path_param)
    json_path = "$" + "".join(f'."{name}"' for name in path)
    at = bindparam(None, json_path, type_=Text())
    kind = func.json_type(column, at)
    return case(
        (kind == "true", "true"),
        (kind == "false", "false"),
        else_=cast(func.json_extract(column, at), Text()),
    )


def data_conditions(
    dialect: str, column: ColumnElement[object], data: DataFilter, *, sealed: bool
) -> list[ColumnElement[bool]]:
    """One condition per data field of the filter (values OR-ed). Sealed job data cannot be
    read by the database: a data filter is then refused."""
    if not data:
        return []
    if sealed:
        raise ValidationError(
            "data.<field> filters are not available while job data is encrypted at rest",
            field="q",
        )
    return [data_text(dialect, column, path).in_(list(values)) for path, values in data]


def nothing() -> ColumnElement[bool]:
    """A condition no row meets (filters that contradict each other)."""
    return false()
