"""The jobs search and the lists' keyset pages, on every store kind.

``?search=`` is a case-insensitive substring of the display name, the job type or the
description, served by a text index (SQLite: FTS5 trigram; PostgreSQL: pg_trgm); the index is
kept in step with creates, updates and deletes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any
from uuid import UUID

import msgspec
import pytest
from sqlalchemy import event

from rota.core.ids import new_id
from rota.core.models import FailureType, Job
from rota.core.ports import Store
from rota.core.records import FailedQuery, JobQuery
from rota.stores.sql import SqlStore, search

from .test_store import make_job


async def found(store: Store, text: str, **query: object) -> list[UUID]:
    page = await store.list_jobs(JobQuery(search=text, **query))  # type: ignore[arg-type]
    return [j.id for j in page.items]


async def all_pages(store: Store, query: JobQuery) -> list[UUID]:
    seen: list[UUID] = []
    cursor: str | None = None
    while True:
        page = await store.list_jobs(replace(query, cursor=cursor))
        assert len(page.items) <= query.limit
        seen += [j.id for j in page.items]
        if page.next_cursor is None:
            return seen
        cursor = page.next_cursor


@pytest.fixture
async def texts(store: Store) -> dict[str, Job]:
    jobs = {
        "report": make_job(display_name="Nightly Sales REPORT", job_type="reports.sales"),
        "percent": make_job(display_name="discount 50%_off", description="a sale"),
        "plain": make_job(display_name="discount 500 off", description="a SALE too"),
        "quote": make_job(display_name='say "hi" * NEAR(x) -y AND', job_type="quotes"),
        "backslash": make_job(description=r"C:\temp\x"),
    }
    await store.create_jobs(list(jobs.values()))
    return jobs


@pytest.mark.parametrize(
    ("few", "types"),
    [
        (search.FEW_MATCHES, search.MANY_TYPES),  # SQLite: the index
        (0, search.MANY_TYPES),  # SQLite: the walk
        (search.FEW_MATCHES, 0),  # the job types that match as a subquery
    ],
)
async def test_search_is_a_case_insensitive_substring_of_any_searched_column(
    store: Store, texts: dict[str, Job], few: int, types: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search, "FEW_MATCHES", few)
    monkeypatch.setattr(search, "MANY_TYPES", types)
    j = {name: job.id for name, job in texts.items()}
    assert await found(store, "sales report") == [j["report"]]  # two words: one substring
    assert await found(store, "ghtly sAL") == [j["report"]]
    assert await found(store, "REPORTS.S") == [j["report"]]  # the job type
    assert await found(store, "sale") == [j["plain"], j["percent"], j["report"]]
    assert await found(store, "report sales") == []  # words in another order: not a substring
    assert await found(store, "nightlyx") == []
    assert await found(store, "quotes") == [j["quote"]]  # a job type alone
    assert await found(store, "S.SAL") == [j["report"]]  # inside the type, another case


async def test_search_takes_every_character_literally(store: Store, texts: dict[str, Job]) -> None:
    j = {name: job.id for name, job in texts.items()}
    assert await found(store, "50%_off") == [j["percent"]]
    assert await found(store, "%_o") == [j["percent"]]
    assert await found(store, "0_o") == []  # ``_`` is no wildcard
    assert await found(store, "0%o") == []  # nor is ``%``
    assert await found(store, "5%") == []
    assert await found(store, '"hi"') == [j["quote"]]  # FTS5 syntax is plain text
    assert await found(store, "* NEAR(x) -y AND") == [j["quote"]]
    assert await found(store, "NEAR(") == [j["quote"]]
    assert await found(store, r"\temp\x") == [j["backslash"]]
    assert await found(store, r"\t") == [j["backslash"]]


async def test_search_shorter_than_three_characters(store: Store, texts: dict[str, Job]) -> None:
    j = {name: job.id for name, job in texts.items()}
    assert await found(store, "%") == [j["percent"]]
    assert await found(store, "_") == [j["percent"]]
    assert await found(store, "Hi") == [j["quote"]]
    assert await found(store, "x") == [j["backslash"], j["quote"]]
    assert await found(store, '"') == [j["quote"]]


async def test_search_follows_updates_and_deletes(store: Store, texts: dict[str, Job]) -> None:
    report = await store.get_job(texts["report"].id)
    renamed = msgspec.structs.replace(
        report, display_name="Weekly digest", job_type="digests", version=2
    )
    await store.update_job(renamed, expected_version=report.version)
    assert await found(store, "nightly") == []
    assert await found(store, "reports.") == []
    assert await found(store, "weekly DIG") == [report.id]
    # An update of other fields leaves the job found by its text.
    again = await store.get_job(report.id)
    await store.update_job(
        msgspec.structs.replace(again, max_retries=7), expected_version=again.version
    )
    assert await found(store, "weekly dig") == [report.id]
    await store.delete_job(report.id)
    assert await found(store, "weekly") == []
    assert await found(store, "sale") == [texts["plain"].id, texts["percent"].id]


@pytest.mark.parametrize("few", [search.FEW_MATCHES, 0])
async def test_search_pages_and_combines_with_filters(
    store: Store, few: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search, "FEW_MATCHES", few)
    matching = [make_job(display_name=f"batch job {n}", is_active=n % 2 == 0) for n in range(7)]
    others = [make_job(display_name=f"other {n}") for n in range(3)]
    await store.create_jobs(matching + others)  # one bulk create: all indexed
    newest_first = [j.id for j in reversed(matching)]
    assert await all_pages(store, JobQuery(search="BATCH JOB", limit=3)) == newest_first
    active = [j.id for j in reversed(matching) if j.is_active]
    assert await all_pages(store, JobQuery(search="batch", is_active=True, limit=2)) == active
    assert await found(store, "batch job 3", job_type="other") == []


async def test_filtered_lists_page_newest_first_without_gaps(store: Store) -> None:
    made = [
        make_job(job_type="a" if n % 3 else "b", is_active=n % 2 == 0, tags=(f"t{n % 2}", "all"))
        for n in range(9)
    ]
    await store.create_jobs(made)
    newest = list(reversed(made))
    cases: list[tuple[JobQuery, list[UUID]]] = [
        (JobQuery(limit=2), [j.id for j in newest]),
        (JobQuery(job_type="a", limit=2), [j.id for j in newest if j.job_type == "a"]),
        (JobQuery(is_active=False, limit=2), [j.id for j in newest if not j.is_active]),
        (JobQuery(is_active=True, limit=2), [j.id for j in newest if j.is_active]),
        (JobQuery(tag="t1", limit=2), [j.id for j in newest if "t1" in j.tags]),
        (JobQuery(tag="all", limit=4), [j.id for j in newest]),
        (
            JobQuery(tag="t0", job_type="b", limit=1),
            [j.id for j in newest if "t0" in j.tags and j.job_type == "b"],
        ),
    ]
    for query, expected in cases:
        assert expected
        assert await all_pages(store, query) == expected, query


@contextmanager
def page_reads(store: SqlStore, *, only: str = "ORDER BY") -> Iterator[list[tuple[str, Any]]]:
    """The statements with ``only`` in them (by default those that read a page, ``ORDER BY``:
    not ``BEGIN``, nor a search's count or statistics) run by the store's readers meanwhile,
    with their parameters; ``only=""``: every statement."""
    statements: list[tuple[str, Any]] = []

    def grab(conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        if only in statement:
            statements.append((statement, params))

    engine = store._reader.sync_engine  # type: ignore[union-attr]
    event.listen(engine, "before_cursor_execute", grab)
    try:
        yield statements
    finally:
        event.remove(engine, "before_cursor_execute", grab)


async def test_sqlite_reads_each_filtered_page_in_index_order(
    store: Store, store_kind: str
) -> None:
    """No list query sorts its matches (``USE TEMP B-TREE FOR ORDER BY``): each is read from
    an index in the list's order, so a page costs the same at any size (SQLite plans without
    statistics, as Rota runs it; PostgreSQL's plans depend on them: see ``rota bench``)."""
    if store_kind != "sqlite":
        pytest.skip("SQLite's plans")
    assert isinstance(store, SqlStore)
    cursor = new_id().hex
    queries = [
        JobQuery(cursor=cursor),
        JobQuery(job_type="t", cursor=cursor),
        JobQuery(is_active=False, cursor=cursor),
        JobQuery(auto_disabled=True, cursor=cursor),
        JobQuery(tag="t", cursor=cursor),
        JobQuery(search="ab", cursor=cursor),
    ]
    with page_reads(store) as statements:
        for query in queries:
            await store.list_jobs(query)
        await store.list_failed(FailedQuery(job_id=new_id(), cursor=cursor))
        await store.list_failed(FailedQuery(resolved=False, cursor=cursor))
        await store.list_failed(FailedQuery(failure_types=(FailureType.PERMANENT,), cursor=cursor))
    assert len(statements) == len(queries) + 3
    async with store._read() as conn:
        driver = (await conn.get_raw_connection()).driver_connection
        for statement, params in statements:
            rows = await (
                await driver.execute(f"EXPLAIN QUERY PLAN {statement}", params)
            ).fetchall()
            plan = " / ".join(str(row[3]) for row in rows)
            assert "TEMP B-TREE" not in plan, (statement, plan)
            assert "USING INDEX" in plan or "USING COVERING INDEX" in plan, (statement, plan)


async def test_postgresql_looks_up_a_rare_word_alone_and_tests_the_whole_text(
    store: Store, store_kind: str
) -> None:
    """Among many jobs that share most of a text's words, the index is asked for the rare
    word only (``Index Cond``), and the rows it finds are tested for the whole text."""
    if store_kind != "postgres":
        pytest.skip("PostgreSQL's statistics and plans")
    assert isinstance(store, SqlStore)
    common = {n: make_job(display_name=f"nightly export {n}") for n in range(1000, 2000)}
    await store.create_jobs(list(common.values()))
    async with store._write() as conn:
        await conn.exec_driver_sql("ANALYZE jobs")
        bounds = (
            await conn.exec_driver_sql(
                "SELECT histogram_bounds::text::text[] FROM pg_stats "
                "WHERE tablename = 'jobs' AND attname = 'display_name'"
            )
        ).scalar_one()
    # a number the sample's histogram does not show (most of them: ~100 bounds of 1,000)
    n = next(n for n in range(1500, 2000) if not any(str(n) in b for b in bounds))
    target = common[n]
    other = make_job(display_name=f"weekly export {n}")  # the rare word, not the whole text
    await store.create_jobs([other])
    with page_reads(store) as statements:
        assert await found(store, f"Nightly Export {n}") == [target.id]
        assert await found(store, f"export {n}") == [other.id, target.id]
        assert await found(store, f"{n} nightly export") == []  # the words in another order
        newest = [j.id for j in reversed(common.values())][:50]
        assert await found(store, "nightly export") == newest
    async with store._read() as conn:
        driver = (await conn.get_raw_connection()).driver_connection
        # a small table: no scan or walk of all of it, as the planner would choose at scale
        await driver.execute("SET enable_seqscan = off; SET enable_indexscan = off")
        try:
            rows = await driver.fetch(f"EXPLAIN {statements[0][0]}", *statements[0][1])
        finally:
            await driver.execute("RESET enable_seqscan; RESET enable_indexscan")
    plan = "\n".join(r[0] for r in rows)
    conditions = [line for line in plan.splitlines() if "Index Cond" in line]
    assert conditions, plan
    assert all(f"%{n}%" in line and "nightly" not in line.lower() for line in conditions), plan
    assert f"%Nightly Export {n}%" in plan  # the whole text: tested on the rows found


def test_fragments_are_the_words_an_index_can_look_up() -> None:
    assert search.fragments("Nightly-export_2024 of #77") == ["nightly", "export", "2024"]
    assert search.fragments("ab c") == []
    assert search.fragments("Export export") == ["export"]


def test_the_rarest_word_is_looked_up_alone_only_beside_common_ones() -> None:
    names = [f"nightly export {n}" for n in range(100, 200)]
    sample = search.ColumnSample(0.0, [("t", 1.0)], [])
    bounds = search.ColumnSample(0.0, [], names)
    assert bounds.share("nightly") == 1.0
    assert bounds.share("export 15") == pytest.approx(10 / 100)  # 150–159
    assert search.rarest_fragment("nightly export 4711", [bounds, sample]) == "4711"
    assert search.rarest_fragment("nightly export", [bounds, sample]) is None  # all common
    assert search.rarest_fragment("4711", [bounds, sample]) is None  # one word: as it is
    assert search.rarest_fragment("nightly export 4711", []) is None  # no statistics yet
    assert search.rarest_fragment("nightly export 47", [bounds]) is None  # "47": too short
    assert bounds.share("142") == pytest.approx(0.01)
    assert search.rarest_fragment("nightly export 142", [bounds]) is None  # in one bound: ~1 %
    # Most common values count with their share, the histogram with what they leave.
    mixed = search.ColumnSample(0.5, [("nightly export 7", 0.3)], ["x 1", "x 2"])
    assert mixed.share("export") == pytest.approx(0.3)
    assert mixed.share("x ") == pytest.approx(0.2)
