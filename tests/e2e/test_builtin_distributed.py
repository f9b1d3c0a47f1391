"""The built-in workers in the distributed mode: a `rota worker --builtin …` process beside a
`rota server`, on this machine's PostgreSQL, Redis and RabbitMQ, against the test's own HTTP
and SMTP servers (fails, not skips, under CI when a service is missing)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.builtin_servers import http_server

from .conftest import free_port, wait_until
from .distributed import COMPLETED, FAILED, Cluster, Proc, cluster, distributed_env, settle  # noqa: F401

pytestmark = pytest.mark.slow


class _Inbox:
    def __init__(self) -> None:
        self.envelopes: list[Any] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.envelopes.append(envelope)
        return "250 OK"


@pytest.fixture
def smtp() -> Iterator[tuple[int, _Inbox]]:
    """An SMTP server (aiosmtpd's controller: its own thread and loop) on loopback."""
    from aiosmtpd.controller import Controller

    inbox = _Inbox()
    port = free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield port, inbox
    finally:
        controller.stop()


def test_a_builtin_worker_process_runs_each_builtin_job(
    cluster: Cluster,  # noqa: F811
    smtp: tuple[int, _Inbox],
    tmp_path: Path,
) -> None:
    cluster.server("s1", ROTA_HTTP__ALLOW_NETWORKS="127.0.0.1/32")  # the same lists as the worker
    smtp_port, inbox = smtp
    with http_server() as web:
        env = {
            **cluster.env,
            "ROTA_DATA_DIR": str(tmp_path / "worker-data"),
            "ROTA_HTTP__ALLOW_NETWORKS": "127.0.0.1/32",
            "ROTA_SQL__CONNECTIONS": json.dumps({"main": cluster.env["ROTA_DATABASE_URL"]}),
            "ROTA_SMTP__HOST": "127.0.0.1",
            "ROTA_SMTP__PORT": str(smtp_port),
            "ROTA_SMTP__STARTTLS": "false",
            "ROTA_SMTP__FROM_ADDRESS": "rota@example.com",
        }
        args = ["worker", "--worker-id", "builtin", "--builtin", "http,sql"]
        args += ["--builtin", "email,maintenance"]
        worker = Proc(args, env, cluster.log_dir / "builtin-worker.log")
        cluster.procs.append(worker)
        wait_until(lambda: cluster.worker_instances(), 30, f"no worker: {cluster.logs()}")

        def create(job_type: str, data: Any) -> str:
            body = {"jobType": job_type, "workerId": "builtin", "jobData": data}
            body["executeAt"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            return str(cluster.api("POST", "/jobs", json=body)["id"])

        jobs = {
            "http": create("http.request", {"url": f"{web.url}/echo", "method": "POST",
                                            "json": {"n": 1}}),
            "sql": create("sql.execute", {"connection": "main", "parameters": {"x": 41},
                                          "statement": "SELECT CAST(:x AS integer) AS x"}),
            "email": create("email.send", {"to": ["ann@example.com"], "subject": "from e2e",
                                           "text": "hello"}),
            "maintenance": create("rota.maintenance", None),
            # allowed at create (loopback is listed), refused when it runs: the hop is not
            "refused": create("http.request", {
                "url": f"{web.url}/redirect?to=http://169.254.169.254/latest/"}),
        }  # fmt: skip
        # what needs no look-up is refused by the server, naming the field
        metadata = {"jobType": "http.request", "workerId": "builtin",
                    "executeAt": "2031-01-01T00:00:00Z",
                    "jobData": {"url": "http://169.254.169.254/latest/"}}  # fmt: skip
        base = cluster.base
        at_create = cluster.session.request("POST", f"{base}/jobs", base, json=metadata)
        assert at_create.status_code == 422, at_create.text
        assert at_create.json()["errors"][0]["field"] == "jobData.url"
        settle(cluster, list(jobs.values()), 60)

    def final(name: str) -> dict[str, Any]:
        [occ] = cluster.occurrences(jobs[name])
        detail: dict[str, Any] = cluster.api("GET", f"/occurrences/{occ['id']}")
        return detail

    http = final("http")
    assert http["status"] == COMPLETED, (http["exception"], cluster.logs())
    assert json.loads(http["result"]["body"])["body"] == '{"n":1}'
    sql = final("sql")
    assert sql["status"] == COMPLETED, sql["exception"]
    assert sql["result"]["rows"] == [[41]]
    mail = final("email")
    assert mail["status"] == COMPLETED, mail["exception"]
    wait_until(lambda: inbox.envelopes, 5, "no mail")
    assert inbox.envelopes[0].rcpt_tos == ["ann@example.com"]
    sweep = final("maintenance")
    assert sweep["status"] == COMPLETED, sweep["exception"]
    assert "occurrencesDeleted" in sweep["result"]
    refused = final("refused")
    assert refused["status"] == FAILED
    assert "169.254.169.254" in refused["exception"]
