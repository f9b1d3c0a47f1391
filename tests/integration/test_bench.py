"""`rota bench` runs its scenarios end to end and writes the documented JSON (small sizes:
this checks that the scenarios work, never how fast they are)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def bench(tmp_path: Path, *args: str) -> dict[str, object]:
    out = tmp_path / "result.json"
    subprocess.run(
        [sys.executable, "-m", "rota", "bench", *args, "--json", str(out)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    result: dict[str, object] = json.loads(out.read_text())
    return result


def test_throughput_scenario(tmp_path: Path) -> None:
    result = bench(tmp_path, "throughput", "--mode", "embedded", "--jobs", "300")
    assert result["scenario"] == "throughput"
    assert result["completed"] == 300
    assert isinstance(result["jobsPerSecond"], float)
    assert result["jobsPerSecond"] > 0
    assert {"runSeconds", "createSeconds", "peakRssMiB", "environment"} <= result.keys()


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
