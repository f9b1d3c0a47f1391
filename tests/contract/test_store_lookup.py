"""The IdLookup contract, on SQLite and PostgreSQL: the job of each occurrence in one read,
the jobs with a display name (ignoring case), and the ids whose hex digits start or end with a
fragment, among a bounded window of the newest records."""

from __future__ import annotations

import pytest

from rota.core.errors import ValidationError
from rota.core.ids import new_id
from rota.core.ports import Store
from rota.core.ports.lookup import IdKind
from tests.contract.test_store import fired, make_job


def hex_of(value: object) -> str:
    return str(value).replace("-", "")


async def test_occurrence_jobs_maps_each_known_occurrence_to_its_job(store: Store) -> None:
    first, second = make_job(), make_job()
    occ_a = await fired(store, first)
    occ_b = await fired(store, second)
    unknown = new_id()
    found = await store.occurrence_jobs([occ_a.id, occ_b.id, unknown, occ_a.id])
    assert found == {occ_a.id: first.id, occ_b.id: second.id}
    assert await store.occurrence_jobs([]) == {}


async def test_jobs_named_matches_the_whole_name_ignoring_case(store: Store) -> None:
    older = make_job(display_name="Nightly report")
    newer = make_job(display_name="nightly REPORT")
    other = make_job(display_name="Nightly report (copy)")
    await store.create_jobs([older, newer, other])
    assert await store.jobs_named("NIGHTLY report") == [newer.id, older.id]
    assert await store.jobs_named("Nightly report", limit=1) == [newer.id]
    assert await store.jobs_named("nothing") == []


async def test_match_ids_by_prefix_or_suffix_within_the_window(store: Store) -> None:
    jobs = [make_job() for _ in range(3)]
    occs = [await fired(store, job) for job in jobs]
    target = occs[0]
    suffix = hex_of(target.id)[-12:]
    prefix = hex_of(jobs[1].id)[:32]
    assert await store.match_ids(IdKind.OCCURRENCE, suffix) == [target.id]
    assert await store.match_ids(IdKind.JOB, prefix) == [jobs[1].id]
    assert await store.match_ids(IdKind.JOB, hex_of(jobs[2].id)[-10:]) == [jobs[2].id]
    # the window counts the newest records: the oldest occurrence is outside a window of 2
    assert await store.match_ids(IdKind.OCCURRENCE, suffix, window=2) == []
    # the limit bounds the answer, newest first (ids made together share their first digits)
    shared = hex_of(jobs[0].id)[:6]
    assert await store.match_ids(IdKind.JOB, shared, limit=2) == [jobs[2].id, jobs[1].id]
    assert await store.match_ids(IdKind.FAILED, suffix) == []
    assert await store.match_ids(IdKind.GRAPH_RUN, suffix) == []


async def test_match_ids_refuses_what_is_not_hex(store: Store) -> None:
    for bad in ("", "xyz", "0e59-d72d", "A" * 33):
        with pytest.raises(ValidationError):
            await store.match_ids(IdKind.JOB, bad)
