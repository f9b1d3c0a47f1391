"""`rota bench` runs its scenarios end to end and writes the documented JSON (small sizes:
this checks that the scenarios work, never how fast they are)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rota.brokers.rabbitmq.names import AmqpNames
from rota.redis.keys import RedisKeys
from rota_bench.scenarios import BENCH_WORKER
from tests.stores import pg_database

REDIS = "redis://127.0.0.1:6379/0"
AMQP = "amqp://guest:guest@127.0.0.1:5672/"


def bench(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, object]:
    out = tmp_path / "result.json"
    subprocess.run(
        [sys.executable, "-m", "rota", "bench", *args, "--json", str(out)],
        check=True,
        capture_output=True,
        timeout=120,
        env=env,
    )
    result: dict[str, object] = json.loads(out.read_text())
    return result


async def _remove(prefix: str) -> None:
    """Delete what a distributed bench under ``prefix`` left: its Redis keys, its queues and
    exchanges in RabbitMQ's ``/``."""
    import aio_pika
    import redis.asyncio as aioredis

    from rota.redis.client import delete_prefix

    client = aioredis.from_url(REDIS)
    try:
        await delete_prefix(client, RedisKeys(prefix))
    finally:
        await client.aclose()
    names = AmqpNames(prefix)
    connection = await aio_pika.connect(AMQP)
    try:
        channel = await connection.channel()
        for queue in (names.job_queue(BENCH_WORKER), names.status_queue, names.logs_queue):
            await channel.queue_delete(queue)
        await channel.queue_delete(names.dead_letter_queue)
        for exchange in (names.status_exchange, names.logs_exchange):
            await channel.exchange_delete(exchange)
        await channel.exchange_delete(names.dead_letter_exchange)
    finally:
        await connection.close()


@pytest.fixture
def distributed_env(pg_template: str) -> Iterator[dict[str, str]]:
    """The environment of a distributed bench: a fresh PostgreSQL database, the real Redis and
    RabbitMQ under a name prefix of its own (other tests may run a bench at the same time),
    all removed afterwards."""
    prefix = f"rota-bench-{uuid.uuid4().hex[:8]}"
    with pg_database(pg_template) as url:
        try:
            yield {
                **os.environ,
                "ROTA_DATABASE_URL": url,
                "ROTA_REDIS_URL": REDIS,
                "ROTA_AMQP_URL": AMQP,
                "ROTA_BENCH_PREFIX": prefix,
            }
        finally:
            asyncio.run(_remove(prefix))


def test_throughput_scenario(tmp_path: Path) -> None:
    result = bench(tmp_path, "throughput", "--mode", "embedded", "--jobs", "300")
    assert result["scenario"] == "throughput"
    assert result["completed"] == 300
    assert isinstance(result["jobsPerSecond"], float)
    assert result["jobsPerSecond"] > 0
    assert {"runSeconds", "createSeconds", "peakRssMiB", "environment"} <= result.keys()
    # the creation and the run together, beside the run alone: from the start of the creation
    figures: dict[str, Any] = result
    both = figures["createAndRunSeconds"]
    assert both >= figures["runSeconds"] > 0
    assert abs(both - (figures["createSeconds"] + figures["runSeconds"])) < 0.01
    assert 0 < figures["createAndRunJobsPerSecond"] <= figures["jobsPerSecond"]
    cpu, cpu_with_create = figures["cpuMicrosPerJob"], figures["createAndRunCpuMicrosPerJob"]
    assert cpu_with_create["bench"] >= cpu["bench"] > 0
    assert set(cpu_with_create) == set(cpu)


def test_throughput_distributed_counts_messages_per_job(
    tmp_path: Path, distributed_env: dict[str, str]
) -> None:
    """Counted, not timed: the bench worker reads job envelopes, so a burst of jobs goes to it
    in a few messages (the embedded mode moves none)."""
    args = ("throughput", "--mode", "distributed", "--jobs", "400")
    result: dict[str, Any] = bench(tmp_path, *args, env=distributed_env)
    assert result["completed"] == 400
    assert 0 < result["brokerMessagesPerJob"] <= 0.1
    embedded = bench(tmp_path, "throughput", "--mode", "embedded", "--jobs", "20")
    assert embedded["brokerMessagesPerJob"] is None


def test_latency_scenario(tmp_path: Path) -> None:
    result = bench(tmp_path, "latency", "--jobs", "50", "--spread", "1")
    assert result["completed"] == 50
    keys = ("p50Ms", "p90Ms", "p99Ms", "p999Ms", "maxMs")
    p50, p90, p99, p999, top = (float(result[k]) for k in keys)  # type: ignore[arg-type]
    assert 0 <= p50 <= p90 <= p99 <= p999 <= top
    assert result["leadSeconds"] == 0.5  # the setting's default


def test_cron_scenario(tmp_path: Path) -> None:
    result = bench(tmp_path, "cron", "--jobs", "5", "--seconds", "2", "--lead", "0.25")
    assert result["scenario"] == "cron"
    assert result["leadSeconds"] == 0.25
    assert result["expectedFires"] == 10
    assert result["started"] == 10
    assert result["firesMissing"] == 0
    assert result["firesDoubled"] == 0
    keys = ("p50Ms", "p90Ms", "p99Ms", "p999Ms", "maxMs")
    p50, p90, p99, p999, top = (float(result[k]) for k in keys)  # type: ignore[arg-type]
    assert 0 <= p50 <= p90 <= p99 <= p999 <= top  # started at, never before, the fire
    slowest = result["slowestSeconds"]
    assert [s["second"] for s in slowest] in ([0.0, 1.0], [1.0, 0.0])  # both fire seconds
    for second in slowest:
        assert 0 <= second["firstMs"] <= second["p50Ms"] <= second["maxMs"] <= top


def test_unknown_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(subprocess.CalledProcessError) as failed:
        bench(tmp_path, "throughput", "--mode", "cluster", "--jobs", "1")
    assert b"unknown bench mode" in failed.value.stderr


def test_login_flood_scenario(tmp_path: Path) -> None:
    """24 clients from one address: the address's burst (20) lets 20 sign-ins through and
    refuses the rest with 429 (none is a server error), and the probe's call is answered
    throughout."""
    result = bench(tmp_path, "login-flood", "--clients", "24", "--seconds", "2", "--same-address")
    assert result["scenario"] == "login-flood"
    assert result["clients"] == 24
    assert int(result["count429"]) >= 4  # type: ignore[call-overload]
    assert result["count5xxOther"] == 0
    assert result["refusedWithoutRetryAfter"] == 0
    assert result["probeErrors"] == 0
    during = result["duringFlood"]
    assert isinstance(during, dict)
    assert during["calls"] > 0
    statuses = result["loginStatuses"]
    assert isinstance(statuses, dict)
    assert set(statuses) <= {"401", "429", "503"}
    memory = result["serverRssMiB"]
    assert isinstance(memory, dict)
    assert memory["peak"] >= memory["before"] > 0


def check_capacity(result: dict[str, Any], mode: str, pending: int, history: int) -> None:
    assert result["scenario"] == "capacity"
    assert result["mode"] == mode
    assert (result["pending"], result["history"], result["reads"]) == (pending, history, 5)
    assert result["jobsPerSecond"] > 0
    assert result["serverCpuMicrosPerJob"] > 0
    create_cpu = result["createCpuMicrosPerJob"]
    assert create_cpu["server"] > 0  # the server's, the client's, and the services'
    assert create_cpu["bench"] > 0
    if mode == "distributed":
        assert create_cpu["postgres"] > 0
    per_job = result["storeBytesPerJob"]
    assert per_job["file" if mode == "embedded" else "jobs"] > 0
    assert result["jobsInStore"] == pending + 1  # and the history's job
    assert result["signIns"] == 1  # a token lasts the short run
    assert result["occurrencesInStore"] == history
    memory = result["serverRssMiB"]
    assert memory["beforeCreate"] > 0
    assert memory["afterCreate"] > 0
    assert result["benchRssMiB"] > 0
    reads = result["readLatency"]
    names = {"jobsList", "jobsSearch", "jobsSearchCommon", "jobOccurrences", "executionsList"}
    names |= {"overview", "tags", "jobsDeepPage", "executionsDeepPage"}
    names |= {"jobStats", "storeOverview", "storeJobCounts"}
    names |= {"jobsOfType", "jobsOfOtherType", "jobsActive", "jobsInactive"}
    assert set(reads) == names
    for read in reads.values():
        assert read["reads"] == 5
        assert 0 < read["p50Ms"] <= read["p99Ms"] <= read["maxMs"]
    # 50 jobs a page: the last page of the jobs (and the history's job) and of the history.
    assert reads["jobsDeepPage"]["page"] == min(50, (pending + 1 + 49) // 50)
    assert reads["executionsDeepPage"]["page"] == min(50, (history + 49) // 50)
    assert result["pageWalk"]["jobs"]["pages"] >= reads["jobsDeepPage"]["page"] - 1
    assert {"environment", "createSeconds", "storeBytesDelta"} <= result.keys()


def test_capacity_scenario_embedded(tmp_path: Path) -> None:
    args = ("capacity", "--pending", "2000", "--history", "500", "--reads", "5")
    result: dict[str, Any] = bench(tmp_path, *args)
    check_capacity(result, "embedded", 2000, 500)
    assert (result["answer"], result["concurrency"]) == ("full", 1)
    assert result["redisBytesDelta"] is None


def test_capacity_scenario_distributed(tmp_path: Path, distributed_env: dict[str, str]) -> None:
    """On a fresh PostgreSQL database, the real Redis and RabbitMQ."""
    args = ("capacity", "--mode", "distributed", "--pending", "2000", "--history", "500")
    result: dict[str, Any] = bench(
        tmp_path,
        *args,
        "--batch",
        "500",
        "--reads",
        "5",
        "--answer",
        "minimal",
        "--concurrency",
        "3",
        env=distributed_env,
    )
    # every job created (4 requests, 3 in flight at first), ids answered
    check_capacity(result, "distributed", 2000, 500)
    assert (result["batch"], result["answer"], result["concurrency"]) == (500, "minimal", 3)
    redis = result["redisBytesAfter"]
    assert redis["usedMemory"] > 0
    assert redis["benchKeys"] > 0  # the event stream, the instance's registration
    assert set(result["redisBytesDelta"]) == {"usedMemory", "benchKeys"}


def test_scaleout_scenario(tmp_path: Path, distributed_env: dict[str, str]) -> None:
    """Two servers and two workers, processes of their own on a fresh PostgreSQL database and
    the real Redis and RabbitMQ: every job of the burst runs once, to Completed."""
    args = ("scaleout", "--servers", "2", "--workers", "2", "--jobs", "200")
    result: dict[str, Any] = bench(tmp_path, *args, env=distributed_env)
    assert result["scenario"] == "scaleout"
    assert (result["servers"], result["workers"], result["jobs"]) == (2, 2, 200)
    assert result["completed"] == result["occurrences"] == result["jobsRun"] == 200
    # Whether the creation outran its planned instant is the machine's speed, reported (a
    # loaded CI machine took more than the margin once), not the scenario's correctness.
    assert isinstance(result["createdLate"], bool)
    assert result["runSeconds"] > 0
    cpu = result["cpuMicrosPerJob"]
    assert cpu["servers"] > 0
    assert cpu["workers"] > 0
