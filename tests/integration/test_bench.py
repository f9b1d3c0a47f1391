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
    p50, p99, top = (float(result[k]) for k in ("p50Ms", "p99Ms", "maxMs"))  # type: ignore[arg-type]
    assert 0 <= p50 <= p99 <= top


def test_unknown_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(subprocess.CalledProcessError) as failed:
        bench(tmp_path, "throughput", "--mode", "cluster", "--jobs", "1")
    assert b"unknown bench mode" in failed.value.stderr
