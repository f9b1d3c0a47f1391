"""The jobs search (``?search=``): a case-insensitive substring of the display name, the job
type or the description (:data:`~rota.stores.schema.SEARCHED`), served by a text index.

- PostgreSQL: ``ILIKE '%…%'`` on each column, which the ``pg_trgm`` GIN index serves; the planner
  (from the columns' statistics) chooses between it and walking the jobs newest first.
- SQLite: the FTS5 ``trigram`` table (a phrase of the searched text: a substring of one column,
  case-insensitive). A text found in few jobs (at most :data:`FEW_MATCHES`) is looked up there;
  one found in many (``capacity``, ``job``) is cheaper to find by walking the jobs newest first
  and testing each, as a page fills within a few rows, than by sorting all its matches. Texts
  shorter than three characters, which a trigram index cannot look up, are walked too. (The
  index folds the case of any letter, the walk's ``lower()`` only of ASCII ones: a non-ASCII
  text in another case is found when few jobs hold it, not among many.)
"""

from __future__ import annotations

from sqlalchemy import ColumnElement, literal_column, or_, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from rota.stores.schema import SEARCH_TABLE, SEARCHED, jobs

FEW_MATCHES = 2000
"""SQLite: up to this many matching jobs, the text index finds them all and they are sorted;
beyond it, the jobs are walked newest first (a page of ``limit`` then reads about
``jobs / matches × limit`` rows: at most 25,000 for a page of 50 among a million jobs, and far
fewer for the common texts that take this way)."""

TRIGRAM = 3
"""The shortest text the trigram index can look up."""

_COUNT = text(
    f"SELECT count(*) FROM (SELECT 1 FROM {SEARCH_TABLE} "
    f"WHERE {SEARCH_TABLE} MATCH :phrase LIMIT :few)"
)


def like_pattern(value: str) -> str:
    """``%value%`` with ``\\``, ``%`` and ``_`` escaped by ``\\`` (taken literally)."""
    escaped = value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def fts_phrase(value: str) -> str:
    """``value`` as one FTS5 phrase (a string: its double quotes doubled)."""
    return '"' + value.replace('"', '""') + '"'


def _walk(value: str) -> ColumnElement[bool]:
    """The test of each row (portable ``lower(column) LIKE lower(pattern)``)."""
    return or_(*(jobs.c[name].icontains(value, autoescape=True) for name in SEARCHED))


def postgresql_search(value: str) -> ColumnElement[bool]:
    pattern = like_pattern(value)
    return or_(*(jobs.c[name].ilike(pattern, escape="\\") for name in SEARCHED))


async def sqlite_search(conn: AsyncConnection, value: str) -> ColumnElement[bool]:
    """The condition on ``jobs`` for ``value`` (one read of the index to count its matches,
    up to :data:`FEW_MATCHES` + 1)."""
    if len(value) < TRIGRAM:
        return _walk(value)
    phrase = fts_phrase(value)
    found = (await conn.execute(_COUNT, {"phrase": phrase, "few": FEW_MATCHES + 1})).scalar_one()
    if found > FEW_MATCHES:
        return _walk(value)
    matched = select(text("rowid")).select_from(text(SEARCH_TABLE))
    matched = matched.where(text(f"{SEARCH_TABLE} MATCH :phrase").bindparams(phrase=phrase))
    return literal_column(f"{jobs.name}.rowid").in_(matched)
