"""The dashboard's browser tests again, against the distributed mode.

Here the ``server`` fixture is a ``rota server`` and a separate ``rota worker`` process on the
real PostgreSQL, Redis and RabbitMQ of this machine (a fresh database, vhost and key prefix):
the live updates come through the Redis event stream, cancellation through the Redis channel to
the worker, the Workers and Admin pages from the Redis registry and bucket leases. The tests are
the embedded module's, collected a second time in this module so they use this ``server``.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser.conftest import (
    ADMIN,
    ROOT,
    Server,
    _free_port,
    artifacts_dir,
    rota_env,
    rota_process,
    signed_in_server,
    wait_live,
)
from tests.browser.test_dashboard import (
    test_a_viewer_sees_no_actions_and_a_forged_action_is_refused,
    test_admin_stops_and_resumes_dispatching,
    test_an_admin_manages_users,
    test_bulk_actions_on_failed_executions,
    test_create_a_cron_job_and_watch_its_executions_arrive,
    test_every_page_renders,
    test_log_lines_arrive_live_and_a_running_execution_is_cancelled,
    test_resolve_a_failed_execution,
    test_sign_in_shows_the_overview,
    test_wrong_password_is_refused,
)
from tests.e2e.distributed import fresh_deployment

__all__ = [
    "test_a_viewer_sees_no_actions_and_a_forged_action_is_refused",
    "test_admin_stops_and_resumes_dispatching",
    "test_an_admin_manages_users",
    "test_bulk_actions_on_failed_executions",
    "test_create_a_cron_job_and_watch_its_executions_arrive",
    "test_every_page_renders",
    "test_log_lines_arrive_live_and_a_running_execution_is_cancelled",
    "test_resolve_a_failed_execution",
    "test_sign_in_shows_the_overview",
    "test_wrong_password_is_refused",
]


@pytest.fixture(scope="module")
def artifacts() -> Path:
    """This mode's screenshots: ``distributed/`` beside the embedded mode's."""
    return artifacts_dir("distributed")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``rota server`` plus ``rota worker tests.browser.jobs`` on PostgreSQL, Redis, RabbitMQ."""
    data = tmp_path_factory.mktemp("rota-browser-distributed")
    with fresh_deployment(data / "state") as deployment:
        env = rota_env(**{k: v for k, v in deployment.items() if k.startswith("ROTA_")})
        env["ROTA_ADMIN_USER"], env["ROTA_ADMIN_PASSWORD"] = ADMIN
        migrate = [sys.executable, "-m", "rota", "migrate"]
        subprocess.run(migrate, cwd=ROOT, env=env, check=True, timeout=120, capture_output=True)
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        server_args = ["server", "--port", str(port), "--log-level", "warning"]
        worker_args = ["worker", "tests.browser.jobs", "--worker-id", "browser"]
        worker_args += ["--concurrency", "4", "--grace", "5", "--log-level", "warning"]
        with (
            rota_process(server_args, env, data / "server.log") as server_process,
            rota_process(worker_args, env, data / "worker.log") as worker_process,
        ):
            wait_live(server_process, url, data / "server.log")
            running = signed_in_server(url)
            with running.api() as api:

                def registered() -> bool:
                    if worker_process.poll() is not None:
                        raise RuntimeError((data / "worker.log").read_text())
                    groups = api.get("/workers").json()["items"]
                    return any(group["instances"] for group in groups)

                running.wait_for("the worker's registration", registered, timeout=30)
            yield running


def test_the_server_runs_distributed(server: Server) -> None:
    """What makes this module's runs different: the stores and services the server reports."""
    with server.api() as api:
        config = api.get("/admin/config").json()
        health = api.get("/health/ready")
    assert config["mode"] == "distributed"
    assert config["effectiveDatabaseUrl"].startswith("postgresql://")
    assert health.status_code == 200, health.text
    assert health.json()["components"] == {
        "store": "ok",
        "index": "ok",
        "broker": "ok",
        "coordination": "ok",
    }
