"""docs/jobs.md ("Writing jobs") is run as written: its Python blocks, in order, make one
module, which a real embedded runtime loads as a worker does; each of its job types is run
and its outcome is the one the page describes. The page's own handler tests pass too."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rota.app.runtime import Runtime
from rota.core.errors import ValidationError
from rota.core.models import Occurrence, OccurrenceStatus
from rota.core.records import OccurrenceQuery
from tests.helpers import RuntimeFactory, eventually

PAGE = Path(__file__).resolve().parents[2] / "docs" / "jobs.md"
S = OccurrenceStatus
FINAL = {S.COMPLETED, S.FAILED, S.TIMED_OUT, S.CANCELLED}


def page_module(directory: Path) -> Path:
    """The page's Python blocks in order, as one module file."""
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)
    assert len(blocks) >= 8, "the page's examples are not where this test looks"
    path = directory / "jobs_page.py"
    path.write_text("\n\n".join(blocks))
    return path


def imported(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_jobs_page", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
async def runtime(runtime_factory: RuntimeFactory, tmp_path: Path) -> Runtime:
    return await runtime_factory({}, [str(page_module(tmp_path))])


async def test_the_pages_handler_tests_pass(tmp_path: Path) -> None:
    module = imported(page_module(tmp_path))
    await module.test_generate_report()
    module.test_export_stops_when_cancelled()


async def run(rt: Runtime, job_type: str, **fields: Any) -> Occurrence:
    job = await rt.jobs.create_job({"job_type": job_type, "execute_at": rt.jobs.now(), **fields})

    async def final() -> Occurrence | None:
        page = await rt.store.list_occurrences(OccurrenceQuery(job_id=job.id, limit=10))
        done = [o for o in page.items if o.status in FINAL]
        return done[0] if done else None

    await eventually(final, 15, f"a run of {job_type} to end")
    found = await final()
    assert found is not None
    return await rt.store.get_occurrence(found.id)


async def test_the_pages_jobs_run_as_it_says(runtime: Runtime) -> None:
    rt = runtime
    report = await run(rt, "docs.report", job_data={"kind": "sales"})
    assert (report.status, report.result) == (S.COMPLETED, "sales.pdf")
    logs = await rt.store.occurrence_logs(report.id)
    assert any("building the sales report" in line.message for _, line in logs)

    # No data: the handler's default (an empty dict; a model's defaults) ...
    notify = await run(rt, "docs.notify")
    assert (notify.status, notify.result) == (S.COMPLETED, "ops@example.com")
    digest = await run(rt, "docs.digest")
    assert digest.status is S.COMPLETED
    assert isinstance(digest.result, dict)
    assert digest.result["team"] == "ops"
    # ... and a model with a required field refuses a job with none when it is created.
    with pytest.raises(ValidationError) as refused:
        await rt.jobs.create_job({"job_type": "docs.report", "execute_at": rt.jobs.now()})
    assert refused.value.field == "jobData.kind"

    fetch = await run(rt, "docs.fetch", job_data={"url": "http://x"}, max_retries=2)
    assert (fetch.status, fetch.attempt) == (S.FAILED, 1)  # permanent: no retry
    assert "only https URLs" in (fetch.exception or "")

    export = await run(rt, "docs.export", job_data={"batches": 100}, timeout_seconds=0.3)
    assert export.status is S.TIMED_OUT
    assert (await run(rt, "docs.export", job_data={"batches": 2})).result == 200

    assert (await run(rt, "docs.cleanup")).result == 0
    assert (await run(rt, "docs.render")).status is S.COMPLETED
