"""The metrics module and the worker's metrics/health endpoint."""

from __future__ import annotations

import asyncio
from uuid import uuid4

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from rota.core.models import OccurrenceStatus, StatusRecord, utcnow
from rota.core.records import AppliedChange, IgnoredRecord, StatusResult
from rota.observability.metrics import LoopHistogram, RotaMetrics, scrape_allowed
from rota.worker.metrics_server import MetricsServer

S = OccurrenceStatus


def parse(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            out[f"{sample.name}{{{labels}}}"] = sample.value
    return out


def change(
    before: OccurrenceStatus, after: OccurrenceStatus, job_type: str = "report"
) -> AppliedChange:
    return AppliedChange(
        occurrence_id=uuid4(),
        job_id=uuid4(),
        from_status=before,
        to_status=after,
        attempt=1,
        job_type=job_type,
    )


def test_loop_histogram_buckets_are_cumulative() -> None:
    hist = LoopHistogram("h_seconds", "doc", (0.1, 1.0), label="job_type")
    hist.observe_many([0.05, 0.5, 0.5, 3.0], "a")
    family = hist.family()
    samples = {(s.name, s.labels.get("le")): s.value for s in family.samples}
    assert samples[("h_seconds_bucket", "0.1")] == 1
    assert samples[("h_seconds_bucket", "1.0")] == 3
    assert samples[("h_seconds_bucket", "+Inf")] == 4
    assert samples[("h_seconds_count", None)] == 4
    assert samples[("h_seconds_sum", None)] == pytest.approx(4.05)
    assert hist.count("a") == 4
    assert hist.count("b") == 0


def test_status_batches_move_the_counters_once_per_kind() -> None:
    metrics = RotaMetrics(CollectorRegistry())
    record = StatusRecord(
        occurrence_id=uuid4(), status=S.RUNNING, timestamp=utcnow(), attempt=1, instance_id="i"
    )
    metrics.record_status(
        StatusResult(
            applied=[
                change(S.QUEUED, S.RUNNING),
                change(S.RUNNING, S.COMPLETED),
                change(S.QUEUED, S.COMPLETED),  # Running folded into the final report
                change(S.RUNNING, S.QUEUED),  # a retry
                change(S.RUNNING, S.TIMED_OUT),
                change(S.RUNNING, S.UNKNOWN),
                change(S.RUNNING, S.COMPLETED, "email"),
            ],
            ignored=[IgnoredRecord(record=record, reason="late")],
        )
    )
    values = parse(metrics.exposition().decode())
    # outcome counters are labelled by job type
    assert values["rota_occurrences_started_total{job_type=report}"] == 2
    assert values["rota_occurrences_completed_total{job_type=report}"] == 2
    assert values["rota_occurrences_completed_total{job_type=email}"] == 1
    assert "rota_occurrences_started_total{job_type=email}" not in values
    assert values["rota_occurrences_retried_total{job_type=report}"] == 1
    assert values["rota_occurrences_timed_out_total{job_type=report}"] == 1
    assert values["rota_occurrences_unknown_total{job_type=report}"] == 1
    assert "rota_occurrences_failed_total{job_type=report}" not in values
    assert values["rota_late_reports_ignored_total{}"] == 1
    assert values["rota_status_reports_ignored_total{reason=late}"] == 1


def test_registries_are_separate_and_workers_leave_out_server_metrics() -> None:
    server = RotaMetrics(CollectorRegistry())
    worker = RotaMetrics(CollectorRegistry(), server=False)
    worker.record_finished("t", 250.0)
    worker.watched.outbox_pending = lambda: 3
    server_text = server.exposition().decode()
    worker_text = worker.exposition().decode()
    assert "rota_occurrences_completed_total" in server_text
    assert "rota_occurrences_completed_total" not in worker_text
    assert "rota_dispatch_lateness_seconds" not in worker_text
    values = parse(worker_text)
    assert values["rota_job_duration_seconds_count{job_type=t}"] == 1
    assert values["rota_outbox_pending{}"] == 3
    assert "rota_job_duration_seconds_count{job_type=t}" not in parse(server_text)


async def test_worker_endpoint_serves_metrics_and_health() -> None:
    metrics = RotaMetrics(CollectorRegistry(), server=False)
    metrics.record_finished("report", 1500.0)
    healthy = {"value": True}
    server = MetricsServer(
        metrics, lambda: (healthy["value"], {"running": 2}), host="127.0.0.1", port=0
    )
    await server.start()
    try:
        assert server.port > 0
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as http:
            response = await http.get("/metrics")
            assert response.status_code == 200
            values = parse(response.text)
            assert values["rota_job_duration_seconds_count{job_type=report}"] == 1
            health = await http.get("/health")
            assert health.status_code == 200
            assert health.json() == {"status": "ok", "running": 2}
            healthy["value"] = False
            health = await http.get("/health")
            assert health.status_code == 503
            assert health.json()["status"] == "unavailable"
            assert (await http.get("/nope")).status_code == 404
            assert (await http.post("/metrics")).status_code == 405
    finally:
        await server.close()
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient() as http:
            await asyncio.wait_for(http.get(f"http://127.0.0.1:{server.port}/health"), 5)


async def test_a_taken_port_is_a_configuration_error() -> None:
    from rota.core.errors import ConfigurationError

    metrics = RotaMetrics(CollectorRegistry(), server=False)
    first = MetricsServer(metrics, lambda: (True, {}), host="127.0.0.1", port=0)
    await first.start()
    try:
        second = MetricsServer(metrics, lambda: (True, {}), host="127.0.0.1", port=first.port)
        with pytest.raises(ConfigurationError, match=f"127.0.0.1:{first.port}"):
            await second.start()
    finally:
        await first.close()


async def test_worker_endpoint_can_require_a_token() -> None:
    metrics = RotaMetrics(CollectorRegistry(), server=False)
    server = MetricsServer(
        metrics, lambda: (True, {}), host="127.0.0.1", port=0, token="scrape-token-42"
    )
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as http:
            assert (await http.get("/metrics")).status_code == 401
            wrong = {"Authorization": "Bearer scrape-token-4"}
            assert (await http.get("/metrics", headers=wrong)).status_code == 401
            right = {"Authorization": "Bearer scrape-token-42"}
            response = await http.get("/metrics", headers=right)
            assert response.status_code == 200
            assert "rota_" in response.text
            assert (await http.get("/health")).status_code == 200  # probes need no token
    finally:
        await server.close()


def test_scrape_allowed_compares_the_whole_bearer_token() -> None:
    assert scrape_allowed(None, None)
    assert scrape_allowed("anything", None)
    assert not scrape_allowed(None, "t0ken")
    assert not scrape_allowed("Bearer t0ke", "t0ken")
    assert not scrape_allowed("Bearer t0ken2", "t0ken")
    assert not scrape_allowed("Token t0ken", "t0ken")
    assert scrape_allowed("bearer  t0ken ", "t0ken")


def test_broker_messages_per_job_can_be_read() -> None:
    metrics = RotaMetrics(CollectorRegistry(), server=False)
    text = metrics.exposition().decode()
    assert "rota_broker_job_messages" not in text  # not watched: not shown
    counts = {"published_messages": 3, "published_jobs": 250, "delivered_messages": 2}
    metrics.watched.broker_messages = lambda: counts
    values = parse(metrics.exposition().decode())
    assert values["rota_broker_job_messages_total{direction=published}"] == 3
    assert values["rota_broker_jobs_total{direction=published}"] == 250
    assert values["rota_broker_job_messages_total{direction=delivered}"] == 2
    assert values["rota_broker_jobs_total{direction=delivered}"] == 0
