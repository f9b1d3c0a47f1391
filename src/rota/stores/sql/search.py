"""The jobs search (``?search=``): a case-insensitive substring of the display name, the job
type or the description (:data:`~rota.stores.schema.SEARCHED`), served by a text index over the
display name and the description (:data:`~rota.stores.schema.TEXT_INDEXED`). The job type is
the same for many jobs: its trigrams would list every job of the type, so the text is looked
for in the job types in use (``job_type_counts``, a few rows), and the jobs of the types that
hold it are found by the ``(job_type, id)`` index (:func:`type_condition`).

- PostgreSQL: ``ILIKE '%…%'`` on each column, which the ``pg_trgm`` GIN index serves; the planner
  (from the columns' statistics) chooses between it and walking the jobs newest first. The index
  intersects the rows of every trigram of the text, reading each one's whole list of rows: a
  text whose words are mostly shared by every job (``capacity job 512345`` among a million
  ``capacity job N``) read ~4,000 pages for one match. So when the columns' statistics (the
  sample ``ANALYZE`` keeps in ``pg_stats``) show a word of the text (:func:`fragments`) in
  few jobs and other words in many, the index is asked for that rare word only, and the rows
  it finds are tested for the whole text (an expression the index does not serve):
  :func:`rarest_fragment`.
- SQLite: the FTS5 ``trigram`` table (a phrase of the searched text: a substring of one column,
  case-insensitive). A text found in few jobs (at most :data:`FEW_MATCHES`) is looked up there;
  one found in many (``capacity``, ``job``) is cheaper to find by walking the jobs newest first
  and testing each, as a page fills within a few rows, than by sorting all its matches. Texts
  shorter than three characters, which a trigram index cannot look up, are walked too. (The
  index folds the case of any letter, the walk's ``lower()`` only of ASCII ones: a non-ASCII
  text in another case is found when few jobs hold it, not among many.)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, func, literal_column, or_, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from rota.stores.schema import SEARCH_TABLE, SEARCHED, TEXT_INDEXED, job_type_counts, jobs

FEW_MATCHES = 2000
"""SQLite: up to this many matching jobs, the text index finds them all and they are sorted;
beyond it, the jobs are walked newest first (a page of ``limit`` then reads about
``jobs / matches × limit`` rows: at most 25,000 for a page of 50 among a million jobs, and far
fewer for the common texts that take this way)."""

TRIGRAM = 3
"""The shortest text the trigram index can look up."""

MANY_TYPES = 200
"""At most this many job types that hold a text are listed in the search's condition; beyond,
the condition asks the types in use again, as a subquery."""

RARE = 0.005
"""PostgreSQL: a word estimated in fewer than this share of the jobs is looked up alone. With
the default statistics target (100 histogram bounds), a word in any one bound is estimated at
about 1 %: only words the sample did not show (or showed in rare common values) qualify."""

_WORD = re.compile(r"[^\W_]+")

_STATS = text(
    "SELECT null_frac, most_common_vals::text::text[], most_common_freqs, "
    "histogram_bounds::text::text[] FROM pg_stats "
    "WHERE schemaname = current_schema() AND tablename = :table AND attname = ANY(:columns)"
).bindparams(table=jobs.name, columns=list(TEXT_INDEXED))

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


@dataclass(frozen=True, slots=True)
class ColumnSample:
    """What ``pg_stats`` holds of one column: its most common values with their shares, the
    bounds of the histogram of the others, and the share of nulls."""

    null_share: float
    common: Sequence[tuple[str, float]]
    bounds: Sequence[str]

    def share(self, word: str) -> float:
        """The estimated share of the rows holding ``word`` (lower case)."""
        common = sum(f for v, f in self.common if word in v.lower())
        if not self.bounds:
            return common
        rest = max(0.0, 1.0 - self.null_share - sum(f for _, f in self.common))
        return common + rest * sum(word in b.lower() for b in self.bounds) / len(self.bounds)


def fragments(value: str) -> list[str]:
    """The words of ``value`` (letters and digits) a trigram index can look up (3 or more
    characters), lower case, longest first. Each is a substring of ``value``: every job that
    holds ``value`` holds each of them."""
    words = {w.lower() for w in _WORD.findall(value) if len(w) >= TRIGRAM}
    return sorted(words, key=lambda w: (-len(w), w))


def rarest_fragment(value: str, samples: Iterable[ColumnSample]) -> str | None:
    """The word of ``value`` to look up alone, or ``None`` (look up the whole text): the word
    the samples show in fewest jobs (over every searched column), when that is under
    :data:`RARE` and ``value`` has other words a lookup of the whole text would read too."""
    words = fragments(value)
    columns = list(samples)
    if len(words) < 2 or not columns:
        return None
    shares = {w: min(1.0, sum(c.share(w) for c in columns)) for w in words}
    rarest = min(words, key=lambda w: shares[w])  # the longest of equals: first
    return rarest if shares[rarest] < RARE else None


def _typed(value: str) -> Select[Any]:
    """The job types in use that hold ``value`` (case-insensitive), with their jobs."""
    t = job_type_counts.c
    n = func.sum(t.n)
    matching = t.job_type.icontains(value, autoescape=True)
    return select(t.job_type, n).where(matching).group_by(t.job_type).having(n > 0)


async def type_condition(
    conn: AsyncConnection, value: str
) -> tuple[ColumnElement[bool] | None, int]:
    """The condition on ``jobs`` for the job types that hold ``value`` (``None``: no type
    does), and how many jobs those types have. Up to :data:`MANY_TYPES` types are listed
    (the ``(job_type, id)`` index reads their jobs); more are a subquery."""
    rows = (await conn.execute(_typed(value).limit(MANY_TYPES + 1))).all()
    if not rows:
        return None, 0
    count = sum(int(n) for _, n in rows)
    if len(rows) > MANY_TYPES:
        return jobs.c.job_type.in_(
            _typed(value).with_only_columns(job_type_counts.c.job_type)
        ), count
    return jobs.c.job_type.in_([job_type for job_type, _ in rows]), count


async def postgresql_search(conn: AsyncConnection, value: str) -> ColumnElement[bool]:
    """The condition on ``jobs`` for ``value`` (one read of the columns' statistics, one of
    the job types in use)."""
    types, _ = await type_condition(conn, value)
    found = await _postgresql_text(conn, value)
    return found if types is None else or_(found, types)


async def _postgresql_text(conn: AsyncConnection, value: str) -> ColumnElement[bool]:
    """The condition for ``value`` in the columns of the text index."""
    pattern = like_pattern(value)
    rows = (await conn.execute(_STATS)).all()
    samples = [
        ColumnSample(
            float(nulls or 0), list(zip(vals or (), freqs or (), strict=False)), hist or ()
        )
        for nulls, vals, freqs, hist in rows
    ]
    word = rarest_fragment(value, samples)
    if word is None:
        return or_(*(jobs.c[name].ilike(pattern, escape="\\") for name in TEXT_INDEXED))
    rare = like_pattern(word)
    whole = (func.coalesce(jobs.c[name], "").ilike(pattern, escape="\\") for name in TEXT_INDEXED)
    return and_(
        or_(*(jobs.c[name].ilike(rare, escape="\\") for name in TEXT_INDEXED)),
        # the whole text, tested on the rows found: through coalesce(), which the index
        # does not serve (else the planner would look it up too)
        or_(*whole),
    )


async def sqlite_search(conn: AsyncConnection, value: str) -> ColumnElement[bool]:
    """The condition on ``jobs`` for ``value`` (one read of the index to count its matches,
    up to :data:`FEW_MATCHES` + 1, and one of the job types in use)."""
    if len(value) < TRIGRAM:
        return _walk(value)
    phrase = fts_phrase(value)
    found = (await conn.execute(_COUNT, {"phrase": phrase, "few": FEW_MATCHES + 1})).scalar_one()
    if found > FEW_MATCHES:
        return _walk(value)
    types, typed = await type_condition(conn, value)
    if found + typed > FEW_MATCHES:
        return _walk(value)
    matched = select(text("rowid")).select_from(text(SEARCH_TABLE))
    matched = matched.where(text(f"{SEARCH_TABLE} MATCH :phrase").bindparams(phrase=phrase))
    in_text = literal_column(f"{jobs.name}.rowid").in_(matched)
    return in_text if types is None else or_(in_text, types)
