"""Prometheus metrics: real jobs through an embedded runtime, then ``/metrics`` scraped and
parsed with prometheus_client's parser."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rota.api.app import create_app
from rota.app.runtime import Runtime
from rota.core.models import OccurrenceStatus
from rota.core.records import OccurrenceQuery
from tests.api_client import api_client
from tests.helpers import RuntimeFactory, eventually

S = OccurrenceStatus
DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.fixture
async def runtime(runtime_factory: RuntimeFactory) -> Runtime:
    overrides = {"scheduler.sweeper_interval_seconds": 0.2, "metrics.public": True}
    return await runtime_factory(overrides, ["tests.integration.ops_jobs"])


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape(rt: Runtime) -> tuple[Samples, set[str]]:
    async with api_client(create_app(rt), role="viewer") as http:
        response = await http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    families: set[str] = set()
    for family in text_string_to_metric_families(response.text):
        families.add(family.name)
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples, families


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_metrics_count_real_jobs(runtime: Runtime) -> None:
    fast = await runtime.jobs.create_job({"job_type": "ops.fast", "cron_expression": "* * * * * *"})
    broken = await runtime.jobs.create_job(
        {"job_type": "ops.broken", "execute_at": runtime.jobs.now()}
    )
    await runtime.jobs.trigger(fast.id, reason="metrics test", force=True)

    async def done() -> bool:
        ok = await runtime.store.count_occurrences([S.COMPLETED], job_id=fast.id)
        bad = await runtime.store.count_occurrences([S.FAILED], job_id=broken.id)
        return ok.get(S.COMPLETED, 0) >= 3 and bad.get(S.FAILED, 0) == 1

    await eventually(done, 20, "three completed and one failed occurrence")
    await runtime.jobs.update_job(fast.id, {"is_active": False})
    samples, families = await scrape(runtime)

    completed = await runtime.store.count_occurrences([S.COMPLETED])
    # the outcome counters, by job type
    fast_done = value(samples, "rota_occurrences_completed_total", job_type="ops.fast")
    assert fast_done >= completed[S.COMPLETED] >= 3
    assert value(samples, "rota_occurrences_failed_total", job_type="ops.broken") == 1
    assert value(samples, "rota_occurrences_failed_total", job_type="ops.fast") == 0
    # broken's second attempt
    assert value(samples, "rota_occurrences_retried_total", job_type="ops.broken") == 1
    assert value(samples, "rota_occurrences_started_total", job_type="ops.fast") >= 3
    assert value(samples, "rota_occurrences_started_total", job_type="ops.broken") == 2
    assert value(samples, "rota_occurrences_created_total", source="manual") == 1
    assert value(samples, "rota_occurrences_created_total", source="schedule") >= 3
    # every finished attempt was timed by the worker, by job type
    assert value(samples, "rota_job_duration_seconds_count", job_type="ops.fast") >= 3
    assert value(samples, "rota_job_duration_seconds_count", job_type="ops.broken") == 2
    assert value(samples, "rota_job_duration_seconds_bucket", job_type="ops.fast", le="+Inf") == (
        value(samples, "rota_job_duration_seconds_count", job_type="ops.fast")
    )
    assert value(samples, "rota_dispatch_lateness_seconds_count") >= 3
    assert value(samples, "rota_leases_held") == runtime.settings.scheduler.bucket_count
    assert value(samples, "rota_workers_online", worker_id="embedded") == 1
    assert value(samples, "rota_dispatcher_last_tick_timestamp_seconds") > time.time() - 60
    assert ("rota_queue_depth", (("queue", "rota.status"),)) in samples
    for name in (
        "rota_occurrences_cancelled",
        "rota_occurrences_timed_out",
        "rota_zombies_detected",
        "rota_auto_disables",
        "rota_late_reports_ignored",
        "rota_duplicate_deliveries",
        "rota_deliveries_claimed_elsewhere",
        "rota_outbox_pending",
        "rota_leases_taken_over",
    ):
        assert name in families, name


async def test_skipped_fires_are_counted_by_reason(runtime: Runtime) -> None:
    """Skipped fires are counted by reason: a job whose type no worker serves."""
    job = await runtime.jobs.create_job(
        {"job_type": "ops.nobody", "execute_at": runtime.jobs.now()}
    )

    async def skipped() -> bool:
        page = await runtime.store.list_occurrences(OccurrenceQuery(job_id=job.id))
        return any(o.status is S.SKIPPED for o in page.items)

    await eventually(skipped, 10, "a skipped fire")
    page = await runtime.store.list_occurrences(OccurrenceQuery(job_id=job.id))
    reason = page.items[0].skip_reason
    assert reason
    samples, _ = await scrape(runtime)
    assert value(samples, "rota_occurrences_skipped_total", reason=reason) == 1


async def test_grafana_dashboard_references_existing_metrics(runtime: Runtime) -> None:
    """Every ``rota_*`` name the dashboard queries is one this code exports."""
    import re

    dashboard = json.loads((DOCS / "grafana-dashboard.json").read_text())
    exprs = [
        target["expr"]
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
        if "expr" in target
    ]
    assert exprs
    referenced = {name for expr in exprs for name in re.findall(r"\brota_[a-z0-9_]+", expr)}
    _, families = await scrape(runtime)
    exported = set()
    for family in families:
        exported |= {family, f"{family}_total", f"{family}_bucket", f"{family}_count",
                     f"{family}_sum"}  # fmt: skip
    missing = sorted(referenced - exported)
    assert not missing, f"the dashboard references unknown metrics: {missing}"
