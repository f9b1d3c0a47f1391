"""Operations on real processes: a `rota server` and a `rota worker` (with its metrics port)
on the real PostgreSQL, Redis and RabbitMQ; both scraped and parsed; JSON logs off a
terminal; a worker that cannot reach RabbitMQ says so and stops."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from .conftest import HERE, free_port, wait_until
from .distributed import Cluster, Proc, distributed_env  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow


def scrape(
    url: str, token: str | None = None
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = httpx.get(url, timeout=10, headers=headers)
    assert response.status_code == 200, response.text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


def test_server_and_worker_metrics_health_and_logs(
    distributed_env: dict[str, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    cluster = Cluster(distributed_env, tmp_path)
    metrics_port = free_port()
    server_metrics = free_port()
    token = "e2e-scrape-token-0123456789"
    try:
        # the server's metrics on a port of their own (open there), none on the API's port
        server = cluster.server("server", ROTA_METRICS__PORT=str(server_metrics))
        args = ["worker", str(HERE / "jobs.py"), "--worker-id", "e2e", "--concurrency", "4"]
        args += ["--metrics-port", str(metrics_port)]
        env = {
            **distributed_env,
            "ROTA_DATA_DIR": str(tmp_path / "data-worker"),
            "ROTA_METRICS__TOKEN": token,  # the worker's need the token
        }
        cluster.procs.append(Proc(args, env, tmp_path / "worker.log"))
        worker_base = f"http://127.0.0.1:{metrics_port}"

        def worker_running() -> bool:
            try:
                r = httpx.get(f"{worker_base}/health", timeout=1)
            except httpx.HTTPError:
                return False
            return r.status_code == 200 and r.json()["state"] == "running"

        wait_until(worker_running, 30, f"worker not healthy: {cluster.logs()}")
        job = cluster.api(
            "POST",
            "/jobs",
            json={"jobType": "e2e.tick", "workerId": "e2e", "cronExpression": "*/1 * * * * *"},
        )

        def three_completed() -> bool:
            return sum(o["status"] == 2 for o in cluster.occurrences(job["id"])) >= 3

        wait_until(three_completed, 40, f"no completed fires: {cluster.logs()}")
        assert httpx.get(f"http://127.0.0.1:{server.port}/metrics").status_code == 404
        served = scrape(f"http://127.0.0.1:{server_metrics}/metrics")
        tick = (("job_type", "e2e.tick"),)
        assert served[("rota_occurrences_completed_total", tick)] >= 3
        assert served[("rota_occurrences_created_total", (("source", "schedule"),))] >= 3
        assert served[("rota_workers_online", (("worker_id", "e2e"),))] == 1
        assert served[("rota_leases_held", ())] == 16
        assert served[("rota_dispatch_lateness_seconds_count", ())] >= 3
        prefix = distributed_env["ROTA_NAME_PREFIX"]
        assert (("rota_queue_depth", (("queue", f"{prefix}.status"),))) in served
        assert httpx.get(f"{worker_base}/metrics", timeout=5).status_code == 401
        at_worker = scrape(f"{worker_base}/metrics", token)
        assert at_worker[("rota_job_duration_seconds_count", (("job_type", "e2e.tick"),))] >= 3
        assert at_worker[("rota_outbox_pending", ())] == 0
        assert ("rota_occurrences_completed_total", tick) not in at_worker  # server-only
        health = httpx.get(f"{worker_base}/health", timeout=5).json()
        assert health["workerId"] == "e2e"
        assert health["instanceId"].startswith("e2e-")
        # stderr is a file here: one JSON object per line
        lines = [
            json.loads(line)
            for line in (tmp_path / "server.log").read_text().splitlines()
            if line.startswith("{")
        ]
        assert any(line["message"] == "rota started" for line in lines)
        assert all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    finally:
        cluster.stop()


def _spans(log: Path) -> list[dict[str, Any]]:
    """The spans the console exporter wrote into a process's log (multi-line JSON objects
    between the one-line JSON log records)."""
    text = log.read_text(errors="replace")
    decoder = json.JSONDecoder()
    spans: list[dict[str, Any]] = []
    at = 0
    while (start := text.find("{", at)) != -1:
        try:
            value, at = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            at = start + 1
            continue
        if isinstance(value, dict) and "context" in value and "name" in value:
            spans.append(value)
    return spans


def test_one_trace_from_the_server_through_rabbitmq_to_the_worker(
    distributed_env: dict[str, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    env = {
        **distributed_env,
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    cluster = Cluster(env, tmp_path)
    try:
        cluster.server("server")
        worker = cluster.worker("worker")
        wait_until(
            lambda: '"worker started"' in worker.log.read_text(errors="replace"),
            30,
            "the worker did not start",
        )
        job = cluster.api(
            "POST",
            "/jobs",
            json={"jobType": "e2e.tick", "workerId": "e2e", "executeAt": "2020-01-01T00:00:00Z"},
        )

        def completed() -> bool:
            return any(o["status"] == 2 for o in cluster.occurrences(job["id"]))

        try:
            wait_until(completed, 40, "the job did not complete")
        except AssertionError:
            seen = [(o["status"], o["skipReason"]) for o in cluster.occurrences(job["id"])]
            raise AssertionError(f"occurrences {seen}: {cluster.logs()}") from None
        [occurrence] = cluster.occurrences(job["id"])
    finally:
        cluster.stop()  # a graceful stop flushes the exporters
    fires = [s for s in _spans(tmp_path / "server.log") if s["name"] == "rota.fire e2e.tick"]
    runs = [s for s in _spans(worker.log) if s["name"] == "rota.run e2e.tick"]
    assert len(fires) == 1, cluster.logs()
    assert len(runs) == 1, cluster.logs()
    fire, run = fires[0], runs[0]
    assert run["context"]["trace_id"] == fire["context"]["trace_id"]
    assert run["parent_id"] == fire["context"]["span_id"]
    assert run["attributes"]["rota.occurrence_id"] == occurrence["id"]
    assert fire["resource"]["attributes"]["service.name"] == "rota-server"
    assert run["resource"]["attributes"]["service.name"] == "rota-worker"


def test_a_worker_without_its_broker_waits_then_names_it(
    distributed_env: dict[str, str],  # noqa: F811
) -> None:
    env = {
        **distributed_env,
        "ROTA_AMQP_URL": "amqp://guest:s3cret@127.0.0.1:1/nowhere",
        "ROTA_STARTUP_WAIT_SECONDS": "1.5",
    }
    done = subprocess.run(
        [sys.executable, "-m", "rota", "worker", str(HERE / "jobs.py"), "--worker-id", "e2e"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "waiting for RabbitMQ at amqp://guest:***@127.0.0.1:1/nowhere" in done.stderr
    assert "did not answer within 1.5 s" in done.stderr
    assert "s3cret" not in done.stderr
