"""Encryption at rest on the embedded runtime (and `rota maintenance reencrypt`): with
ROTA_ENCRYPTION__KEYS a job runs with its plain data, the job message carries the sealed
envelope (unless plain_to_workers), the store's rows hold envelopes only, and the API gives the
data and the result back plain; the command moves stored values to the newest key, resumably."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text
from typer.testing import CliRunner

from rota.api.app import create_app
from rota.app.runtime import Runtime
from rota.cli import app
from rota.core.sealing import DataSeal, KeySettingError, envelope_version, is_envelope, new_key
from rota.stores.migrate import upgrade
from rota.stores.schema import jobs
from rota.stores.sql import SqlStore
from tests.api_client import api_client
from tests.contract.test_store import make_job
from tests.helpers import RuntimeFactory, eventually
from tests.integration import sealed_jobs

WITHIN = 15.0
KEY = new_key()
TOKEN = "tok-9f1d2c"


async def raw_rows(runtime: Runtime) -> list[str]:
    store = runtime.store
    assert isinstance(store, SqlStore)
    async with store._read() as conn:
        jobs = (await conn.execute(text("SELECT job_data FROM jobs"))).all()
        occs = (await conn.execute(text("SELECT job_data, result FROM occurrences"))).all()
    return [str(v) for r in [*jobs, *occs] for v in r]


async def run_one(runtime: Runtime) -> tuple[dict[str, Any], dict[str, Any]]:
    """Create ``sealed.echo`` through the API and wait for its run; the job and the run."""
    async with api_client(create_app(runtime)) as client:
        made = await client.post(
            "/api/v1/jobs",
            json={
                "jobType": "sealed.echo",
                "executeAt": runtime.jobs.now().isoformat(),
                "jobData": {"token": TOKEN},
            },
        )
        assert made.status_code == 201, made.text
        job = made.json()
        assert job["jobData"] == {"token": TOKEN}

        async def finished() -> dict[str, Any] | None:
            runs = await client.get("/api/v1/occurrences", params={"jobId": job["id"]})
            items = runs.json()["items"]
            return items[0] if items and items[0]["statusName"] == "Completed" else None

        await eventually(finished, WITHIN, "the sealed job's run")
        run = await finished()
        assert run is not None
        detail = await client.get(f"/api/v1/occurrences/{run['id']}")
        return (await client.get(f"/api/v1/jobs/{job['id']}")).json(), detail.json()


@pytest.mark.parametrize("plain_to_workers", [False, True])
async def test_a_job_runs_with_encryption_on(
    runtime_factory: RuntimeFactory, plain_to_workers: bool
) -> None:
    sealed_jobs.SEEN.clear()
    runtime = await runtime_factory(
        {
            "encryption.keys": f"v1:{KEY}",
            "encryption.plain_to_workers": plain_to_workers,
        },
        ["tests.integration.sealed_jobs"],
    )
    sent: list[object] = []
    publish = runtime.broker.publish_jobs

    async def spy(messages: Any, *, envelopes: Any = None) -> None:
        sent.extend(m.job_data for m in messages)
        await publish(messages, envelopes=envelopes)

    runtime.broker.publish_jobs = spy  # type: ignore[method-assign]
    job, run = await run_one(runtime)
    assert job["jobData"] == {"token": TOKEN}
    assert run["jobData"] == {"token": TOKEN}
    assert run["result"] == {"echo": f"result-{TOKEN}"}
    assert sealed_jobs.SEEN == [{"token": TOKEN}]  # the handler got it plain
    assert sent
    assert all(is_envelope(d) != plain_to_workers for d in sent)
    raw = await raw_rows(runtime)
    assert not any(TOKEN in value for value in raw)
    assert sum('"$enc"' in value or "'$enc'" in value for value in raw) == 3


async def test_a_malformed_key_stops_the_start(runtime_factory: RuntimeFactory) -> None:
    with pytest.raises(KeySettingError, match="ROTA_ENCRYPTION__KEYS") as caught:
        await runtime_factory({"encryption.keys": "v1:c2hvcnQ="}, [])
    assert "c2hvcnQ" not in str(caught.value)


async def test_plain_values_without_keys(runtime_factory: RuntimeFactory) -> None:
    runtime = await runtime_factory({}, ["tests.integration.sealed_jobs"])
    await run_one(runtime)
    assert any(TOKEN in value for value in await raw_rows(runtime))


def test_the_reencrypt_command_moves_stored_values_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'rota.db'}"
    old, new = new_key(), new_key()
    made = [make_job(job_data={"token": TOKEN, "n": n}) for n in range(5)]

    async def seed() -> None:
        await upgrade(url)
        store = SqlStore(url, seal=DataSeal.from_setting(f"v1:{old}"))
        await store.open()
        try:
            await store.create_jobs(made)
        finally:
            await store.close()

    async def versions() -> list[str | None]:
        store = SqlStore(url)
        await store.open()
        try:
            async with store._read() as conn:
                rows = (await conn.execute(select(jobs.c.job_data))).all()
            return sorted(str(envelope_version(r[0])) for r in rows)
        finally:
            await store.close()

    asyncio.run(seed())
    monkeypatch.setenv("ROTA_DATABASE_URL", url)
    monkeypatch.setenv("ROTA_ENCRYPTION__KEYS", f"v2:{new},v1:{old}")
    result = CliRunner().invoke(app, ["maintenance", "reencrypt", "--batch", "2"])
    assert result.exit_code == 0, result.output
    assert "jobs: 2 read, 2 moved to v2; last key" in result.output
    assert "jobs: 5 read, 5 moved to v2; done" in result.output
    assert "reencrypt done" in result.output
    assert new not in result.output
    assert old not in result.output
    assert asyncio.run(versions()) == ["v2"] * 5
    again = CliRunner().invoke(app, ["maintenance", "reencrypt"])  # nothing left to move
    assert "jobs: 5 read, 0 moved to v2; done" in again.output
    monkeypatch.setenv("ROTA_ENCRYPTION__KEYS", "v2:bm90IGEga2V5")
    refused = CliRunner().invoke(app, ["maintenance", "reencrypt"])
    assert refused.exit_code == 2
    assert "ROTA_ENCRYPTION__KEYS" in refused.output
    assert "bm90IGEga2V5" not in refused.output
