"""Secret references in job data on the embedded runtime: the handler gets the secret's value
(from ``ROTA_SECRET_<NAME>`` or a file of the worker's secrets directory), while the job, the
occurrence, its logs, result and exception, and the dead-letter record keep or show only the
reference; a missing secret fails the attempt for good, naming the reference."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from rota.app.runtime import Runtime
from rota.core.models import FailureType, Occurrence, OccurrenceStatus
from rota.core.records import FailedQuery
from tests.helpers import RuntimeFactory
from tests.integration import secret_jobs
from tests.integration.builtin_servers import _Server, http_server, run_job, wait_for_log

S = OccurrenceStatus
TOKEN = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
FILED = "file-secret-9f8e7d6c5b4a"
REF = {"$secret": "BILLING_TOKEN"}


@pytest.fixture(autouse=True)
def _secrets(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("ROTA_SECRET_BILLING_TOKEN", TOKEN)
    monkeypatch.setenv("BILLING_TOKEN", "not-for-job-authors")  # no prefix: never read
    secret_jobs.SEEN.clear()
    yield
    secret_jobs.SEEN.clear()


async def stored_text(rt: Runtime, occ: Occurrence) -> str:
    """Everything the store holds about ``occ`` that anyone may read, as one text: the job,
    its versions, the occurrence, its log lines and its dead-letter records."""
    job = await rt.store.get_job(occ.job_id)
    versions = await rt.store.job_versions(occ.job_id)
    logs = await rt.store.occurrence_logs(occ.id)
    failed = await rt.store.list_failed(FailedQuery(job_id=occ.job_id))
    parts = [job.job_data, [v.snapshot for v in versions], occ.job_data, occ.result]
    parts += [occ.exception, [(r.message, r.data) for _, r in logs]]
    parts += [[(f.exception, f.job_data, f.raw_message) for f in failed.items]]
    return orjson.dumps(parts, default=str).decode()


async def test_a_user_job_gets_the_value_and_nothing_stored_has_it(
    runtime_factory: RuntimeFactory,
) -> None:
    rt = await runtime_factory(None, ["tests.integration.secret_jobs"])
    occ = await run_job(rt, "secrets.echo", {"token": REF, "note": "monthly"})
    assert occ.status is S.COMPLETED, occ.exception
    assert secret_jobs.SEEN == [{"token": TOKEN, "note": "monthly"}]  # resolved for the handler
    assert occ.job_data == {"token": REF, "note": "monthly"}  # stored as written
    assert occ.result == {
        "token": "[secret BILLING_TOKEN]",
        "echo": ["Bearer [secret BILLING_TOKEN]"],
    }
    await wait_for_log(rt, occ, "calling the billing API with [secret BILLING_TOKEN]")
    text = await stored_text(rt, occ)
    assert TOKEN not in text
    assert "BILLING_TOKEN" in text


async def test_an_exception_and_the_dead_letter_record_are_masked(
    runtime_factory: RuntimeFactory,
) -> None:
    rt = await runtime_factory(None, ["tests.integration.secret_jobs"])
    occ = await run_job(rt, "secrets.echo", {"token": REF, "fail": True})
    assert occ.status is S.FAILED
    assert "refused Authorization: Bearer [secret BILLING_TOKEN]" in (occ.exception or "")
    failed = await rt.store.list_failed(FailedQuery(job_id=occ.job_id))
    assert [f.failure_type for f in failed.items] == [FailureType.RETRIES_EXHAUSTED]
    assert TOKEN not in await stored_text(rt, occ)


async def test_a_missing_secret_fails_for_good_naming_the_reference(
    runtime_factory: RuntimeFactory,
) -> None:
    rt = await runtime_factory(None, ["tests.integration.secret_jobs"])
    occ = await run_job(rt, "secrets.echo", {"token": {"$secret": "NOPE"}}, max_retries=3)
    assert occ.status is S.FAILED
    assert occ.attempt == 1  # permanent: no retry
    assert "secret reference 'NOPE' at jobData.token cannot be resolved" in (occ.exception or "")
    assert secret_jobs.SEEN == []
    failed = await rt.store.list_failed(FailedQuery(job_id=occ.job_id))
    assert [f.failure_type for f in failed.items] == [FailureType.PERMANENT]
    # a variable without the prefix is not a secret: job authors cannot read the worker's
    plain = await run_job(rt, "secrets.echo", {"token": {"$secret": "HOME"}})
    assert plain.status is S.FAILED
    assert "'HOME'" in (plain.exception or "")


async def test_a_secret_from_the_secrets_directory(
    runtime_factory: RuntimeFactory, tmp_path: Path
) -> None:
    directory = tmp_path / "secrets"
    directory.mkdir()
    (directory / "smtp-password").write_text(FILED + "\n")
    rt = await runtime_factory({"worker.secrets_dir": directory}, ["tests.integration.secret_jobs"])
    occ = await run_job(rt, "secrets.echo", {"token": {"$secret": "smtp-password"}})
    assert occ.status is S.COMPLETED, occ.exception
    assert secret_jobs.SEEN == [{"token": FILED}]  # the trailing newline dropped
    assert FILED not in await stored_text(rt, occ)
    # rotated in place: the next run reads the new file
    (directory / "smtp-password").write_text("rotated-" + FILED)
    again = await run_job(rt, "secrets.echo", {"token": {"$secret": "smtp-password"}})
    assert secret_jobs.SEEN[-1] == {"token": "rotated-" + FILED}
    assert "rotated-" not in await stored_text(rt, again)


async def test_a_bad_reference_is_refused_when_the_job_is_created(
    runtime_factory: RuntimeFactory,
) -> None:
    from rota.core.errors import ValidationError

    rt = await runtime_factory(None, ["tests.integration.secret_jobs"])
    with pytest.raises(ValidationError) as caught:
        await rt.jobs.create_job(
            {"job_type": "secrets.echo", "execute_at": rt.jobs.now(),
             "job_data": {"token": {"$secret": "../../etc/shadow"}}}
        )  # fmt: skip
    assert caught.value.field == "jobData.token"


@pytest.fixture
def server() -> Iterator[_Server]:
    with http_server() as s:
        yield s


async def test_http_request_sends_the_secret_and_stores_only_the_reference(
    runtime_factory: RuntimeFactory, server: _Server
) -> None:
    rt = await runtime_factory({"http.allow_networks": "127.0.0.1/32"}, ["rota.builtin.http"])
    data = {
        "url": f"{server.url}/echo",
        "method": "POST",
        "headers": {"Authorization": {"$secret": "BILLING_TOKEN"}},
        "json": {"apiKey": REF},
    }
    occ = await run_job(rt, "http.request", data)
    assert occ.status is S.COMPLETED, occ.exception
    [(_, _, headers, body)] = server.seen
    assert headers["Authorization"] == TOKEN  # the server got the value
    assert json.loads(body) == {"apiKey": TOKEN}
    echoed = json.loads(occ.result["body"])  # the echo of the headers: masked
    assert echoed["headers"]["Authorization"] == "[secret BILLING_TOKEN]"
    assert occ.job_data["headers"] == {"Authorization": REF}
    assert TOKEN not in await stored_text(rt, occ)
