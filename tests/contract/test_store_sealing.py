"""Encryption at rest, on SQLite and PostgreSQL: with keys, the rows hold no plain job data or
result (read raw), the store's reads give them back plain (jobs, bulk creates by COPY and
executemany, versions, occurrences, results, dead letters, kept idempotent answers,
job audit entries);
``rota maintenance reencrypt``'s batches move every value to the newest key, and a run stopped
halfway resumes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest
from msgspec.structs import replace
from sqlalchemy import select, text

from rota.core.ids import new_id
from rota.core.models import FailureType, OccurrenceStatus
from rota.core.records import FailedQuery
from rota.core.sealing import DataSeal, envelope_version, is_envelope, new_key
from rota.core.security import AuditEntry, AuditQuery
from rota.stores.schema import (
    audit_entries,
    failed_occurrences,
    idempotency_keys,
    job_versions,
    jobs,
    occurrences,
)
from rota.stores.sql import SqlStore
from tests.contract.test_store import NOW, fired, make_job, status

S = OccurrenceStatus
K1, K2 = new_key(), new_key()
SECRET = "Bearer tok-5e3c"
DATA = {"headers": {"Authorization": SECRET}, "n": 1}


@pytest.fixture
async def sealed(store_url: str) -> AsyncIterator[SqlStore]:
    instance = SqlStore(store_url, seal=DataSeal.from_setting(f"v1:{K1}"))
    await instance.open()
    try:
        yield instance
    finally:
        await instance.close()


async def raw_texts(store: SqlStore) -> str:
    """Every sealed column of every row, as the database holds it."""
    parts: list[str] = []
    async with store._read() as conn:
        for table, columns in (
            (jobs, ("job_data",)),
            (job_versions, ("snapshot",)),
            (occurrences, ("job_data", "result")),
            (failed_occurrences, ("job_data",)),
        ):
            names = ", ".join(f"CAST({c} AS TEXT)" for c in columns)
            rows = (await conn.execute(text(f"SELECT {names} FROM {table.name}"))).all()
            parts += [str(v) for r in rows for v in r]
    return "\n".join(parts)


async def raw_values(store: SqlStore, column: Any) -> list[Any]:
    async with store._read() as conn:
        return [r[0] for r in (await conn.execute(select(column))).all()]


async def test_rows_hold_no_plaintext_and_reads_are_plain(sealed: SqlStore) -> None:
    one = make_job(job_data=DATA)
    bulk = [make_job(job_data={**DATA, "n": n}) for n in range(3)]  # COPY / executemany
    await sealed.create_jobs([one])
    await sealed.create_jobs(bulk)
    assert (await sealed.get_job(one.id)).job_data == DATA
    assert [(await sealed.get_job(j.id)).job_data for j in bulk] == [j.job_data for j in bulk]
    stored = await sealed.get_job(one.id)
    edited = await sealed.update_job(
        replace(stored, job_data={**DATA, "n": 2}, version=stored.version + 1),
        expected_version=stored.version,
    )
    assert edited.job_data == {**DATA, "n": 2}
    [version] = await sealed.job_versions(one.id)
    assert version.snapshot["jobData"] == DATA

    occ = await fired(sealed, make_job(job_data=DATA))
    assert occ.job_data == DATA
    assert (await sealed.get_occurrence(occ.id)).job_data == DATA
    await sealed.apply_status(
        [status(occ, S.RUNNING), status(occ, S.COMPLETED, result={"token": SECRET})]
    )
    done = await sealed.get_occurrence(occ.id)
    assert done.result == {"token": SECRET}
    failing = await fired(sealed, make_job(job_data=DATA))
    await sealed.apply_status(
        [status(failing, S.FAILED, failure_type=FailureType.PERMANENT, exception="no")]
    )
    [dead] = (await sealed.list_failed(FailedQuery(limit=10))).items
    assert dead.job_data == DATA

    raw = await raw_texts(sealed)
    assert "tok-5e3c" not in raw
    assert "Authorization" not in raw
    assert raw.count('"$enc"') >= 9  # every value above, as an envelope
    for value in await raw_values(sealed, jobs.c.job_data):
        assert is_envelope(value)


async def test_a_store_without_the_keys_reads_envelopes(sealed: SqlStore, store_url: str) -> None:
    job = make_job(job_data=DATA)
    await sealed.create_jobs([job])
    plain = SqlStore(store_url)
    await plain.open()
    try:
        assert is_envelope((await plain.get_job(job.id)).job_data)
    finally:
        await plain.close()


async def test_no_keys_store_plain_values(store_url: str) -> None:
    plain = SqlStore(store_url)
    await plain.open()
    try:
        await plain.create_jobs([make_job(job_data=DATA)])
        assert await raw_values(plain, jobs.c.job_data) == [DATA]
    finally:
        await plain.close()


async def test_reencrypt_moves_every_value_to_the_newest_key_and_resumes(
    sealed: SqlStore, store_url: str
) -> None:
    made = [make_job(job_data={**DATA, "n": n}) for n in range(5)]
    await sealed.create_jobs(made)
    occ = await fired(sealed, make_job(job_data=DATA))
    await sealed.apply_status([status(occ, S.COMPLETED, result={"r": 1})])
    await sealed.append_audit([audit_of(made[0].id)])
    rotated_seal = DataSeal.from_setting(f"v2:{K2},v1:{K1}")
    rotated = SqlStore(store_url, seal=rotated_seal)
    await rotated.open()
    try:
        first = await rotated.reencrypt_batch(rotated_seal, "jobs", None, 2)
        assert (first.read, first.rewritten) == (2, 2)
        assert first.last is not None
        versions = [envelope_version(v) for v in await raw_values(rotated, jobs.c.job_data)]
        assert sorted(versions) == ["v1"] * 4 + ["v2"] * 2  # stopped after one batch
        again = await rotated.reencrypt_batch(rotated_seal, "jobs", None, 100)  # rerun
        assert (again.read, again.rewritten, again.last) == (6, 4, None)
        for table in ("job_versions", "occurrences", "failed_occurrences", "audit_entries"):
            await rotated.reencrypt_batch(rotated_seal, table, None, 100)
        [before] = await raw_values(rotated, audit_entries.c.before)
        assert envelope_version(before["jobData"]) == "v2"
        for column in (jobs.c.job_data, occurrences.c.job_data, occurrences.c.result):
            assert {envelope_version(v) for v in await raw_values(rotated, column)} == {"v2"}
        # the old key can go: every read opens with v2 alone
        only_v2 = SqlStore(store_url, seal=DataSeal.from_setting(f"v2:{K2}"))
        await only_v2.open()
        try:
            assert (await only_v2.get_job(made[0].id)).job_data == made[0].job_data
            assert (await only_v2.get_occurrence(occ.id)).result == {"r": 1}
        finally:
            await only_v2.close()
        # decrypt-only: reencrypt writes the values back plain (turning encryption off)
        off = DataSeal.from_setting(f"v2:{K2}", current="none")
        await rotated.reencrypt_batch(off, "jobs", None, 100)
        assert sorted(v["n"] for v in await raw_values(rotated, jobs.c.job_data)) == [
            0,
            1,
            1,
            2,
            3,
            4,
        ]
    finally:
        await rotated.close()


async def test_a_kept_idempotent_answer_is_sealed(sealed: SqlStore) -> None:
    now = NOW
    assert await sealed.claim_idempotency_key("s1", "f", now, now + timedelta(days=1)) is None
    body = b'{"jobData": {"headers": {"Authorization": "Bearer tok-5e3c"}}}'
    await sealed.complete_idempotency_key("s1", 201, body, [], now + timedelta(days=1))
    [raw] = await raw_values(sealed, idempotency_keys.c.body)
    assert b"tok-5e3c" not in bytes(raw)
    kept = await sealed.claim_idempotency_key("s1", "f", now, now + timedelta(days=1))
    assert kept is not None
    assert kept.body == body


def audit_of(job_id: UUID) -> AuditEntry:
    return AuditEntry(
        id=new_id(),
        at=NOW,
        actor="ann",
        action="job.updated",
        resource_type="job",
        resource_id=str(job_id),
        before={"displayName": "a", "jobData": DATA},
        after={"displayName": "b", "jobData": None},
    )


async def test_a_jobs_audit_entries_hold_its_data_sealed(sealed: SqlStore) -> None:
    job = make_job(job_data=DATA)
    entry = audit_of(job.id)
    await sealed.append_audit([entry])
    [before] = await raw_values(sealed, audit_entries.c.before)
    assert "tok-5e3c" not in str(before)
    assert before["displayName"] == "a"  # the rest stays readable
    [read] = (await sealed.list_audit(AuditQuery(resource_id=str(job.id)))).items
    assert read == entry
