"""The job types workers have ever declared (``JobTypeHistory``), on every store kind."""

from __future__ import annotations

from datetime import timedelta

from rota.core.ports import JobTypeSchemas, Store
from rota.core.records import PublishedSchema

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


REPORT_SCHEMA = {"type": "object", "required": ["kind"], "properties": {"kind": {}}}


async def test_the_last_published_schema_is_kept_with_the_type(store: Store) -> None:
    assert isinstance(store, JobTypeSchemas)
    assert await store.published_schemas() == []
    await store.record_job_types([("old", "olds")], NOW)  # declared before schemas were kept
    first = PublishedSchema("report", "reports", {"type": "object"}, NOW)
    await store.record_schemas([first, PublishedSchema("mail", "mailers", None, NOW)])
    # A new schema replaces the pair's; the pair itself stays declared once, since NOW.
    later = NOW + timedelta(minutes=5)
    await store.record_schemas(
        [
            PublishedSchema("report", "reports", {"x": 1}, later),
            PublishedSchema("report", "reports", REPORT_SCHEMA, later),  # the last one wins
        ]
    )
    assert await store.published_schemas() == [
        PublishedSchema("mail", "mailers", None, NOW),
        PublishedSchema("report", "reports", REPORT_SCHEMA, later),
    ]
    assert await store.declared_job_types() == {
        ("old", "olds"),
        ("report", "reports"),
        ("mail", "mailers"),
    }
    assert await store.record_job_types([("report", "reports")], later) == 0  # known
    long = "x" * 201
    await store.record_schemas([PublishedSchema(long, "g", None, NOW)])
    assert len(await store.published_schemas()) == 2
