"""The job types workers have ever declared (``JobTypeHistory``), on every store kind."""

from __future__ import annotations

from datetime import timedelta

from rota.core.ports import Store

from .test_store import NOW


async def test_declared_job_types_are_remembered_once_each(store: Store) -> None:
    assert await store.declared_job_types() == set()
    assert await store.record_job_types([("report", "reports"), ("mail", "mailers")], NOW) == 2
    # Known pairs are left as they are; a known type declared by another group is new.
    later = NOW + timedelta(minutes=1)
    pairs = [("report", "reports"), ("report", "reports"), ("report", "other")]
    assert await store.record_job_types(pairs, later) == 1
    assert await store.declared_job_types() == {
        ("report", "reports"),
        ("report", "other"),
        ("mail", "mailers"),
    }


async def test_names_too_long_to_keep_are_left_out(store: Store) -> None:
    long = "x" * 201
    assert await store.record_job_types([(long, "g"), ("t", long), ("", "g")], NOW) == 0
    assert await store.record_job_types([], NOW) == 0
    assert await store.declared_job_types() == set()
