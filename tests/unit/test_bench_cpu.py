"""The benches' CPU per job: each process's own use between two readings."""

from __future__ import annotations

import psutil

from rota_bench.scenarios import _cpu_per_job, _cpu_seconds


def test_a_process_that_ends_between_the_readings_takes_nothing_away() -> None:
    before = {("postgres", 10): 5.0, ("postgres", 11): 3.0, ("server", 20): 1.0}
    # backend 10 closed; backend 12 started and used 0.5 s; backend 11 used 1 s
    after = {("postgres", 11): 4.0, ("postgres", 12): 0.5, ("server", 20): 3.0}
    assert _cpu_per_job(before, after, 1000) == {"postgres": 1500.0, "server": 2000.0}
    assert _cpu_per_job(before, after, 0) == {}


def test_the_given_processes_are_read_by_role() -> None:
    me = psutil.Process()
    sum(range(200_000))  # some CPU of our own
    read = _cpu_seconds({"bench": [me]})
    assert read[("bench", me.pid)] > 0
    assert all(role in {"bench", "postgres", "rabbitmq", "redis"} for role, _ in read)
