"""One owner per embedded store, as a user meets it: a second ``rota dev`` on a data dir in use
is refused before it runs anything, naming the process that holds the store; once that
process is killed with -9, a new one starts on the same data dir."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from .conftest import AUTH_ENV, RotaProcess, free_port

pytestmark = pytest.mark.slow


def _second_dev(rota: RotaProcess, port: int) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "rota", "dev", "--no-demo", "--data-dir", str(rota.data_dir)]
    env = {**os.environ, **AUTH_ENV, "ROTA_EVENT_LOOP": "asyncio"}
    return subprocess.run(
        [*args, "--port", str(port)], env=env, capture_output=True, text=True, timeout=60
    )


def test_a_second_dev_on_a_data_dir_in_use_is_refused_until_the_owner_dies(
    rota_process: RotaProcess,
) -> None:
    rota = rota_process
    rota.start()
    assert rota.proc is not None
    first = rota.proc.pid
    job = rota.api("POST", "/jobs", json={"jobType": "e2e.tick", "cronExpression": "0 0 1 1 *"})

    for port in (free_port(), rota.port):  # another port, and the same one: the store first
        second = _second_dev(rota, port)
        assert second.returncode == 2, second.stderr
        said = " ".join(second.stderr.split())  # rich wraps long lines
        assert f"in use by pid {first} on " in said
        assert "rota dev" in said
        assert "--data-dir" in said
        assert "is running" not in second.stderr + second.stdout  # refused before it ran
    assert rota.proc.poll() is None  # the owner runs on, untouched
    assert rota.api("GET", f"/jobs/{job['id']}")["id"] == job["id"]

    rota.kill9()
    rota.start()  # the killed owner left no lock behind
    assert rota.proc.pid != first
    assert rota.api("GET", f"/jobs/{job['id']}")["id"] == job["id"]
    third = _second_dev(rota, free_port())
    assert third.returncode == 2, third.stderr
    assert f"in use by pid {rota.proc.pid} on " in " ".join(third.stderr.split())
