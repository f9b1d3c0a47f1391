"""`rota bench` lives outside the product package (``rota_bench``) and is added to the ``rota``
command through an entry point; without its ``bench`` extra (psutil) it says how to install
it rather than failing with a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

HIDE_PSUTIL = "import sys; sys.modules['psutil'] = None  # as if the extra were not installed\n"
RUN_ROTA = "from rota.cli import main; sys.argv = ['rota', *sys.argv[1:]]; main()\n"


def rota(*args: str, hide_psutil: bool = False) -> subprocess.CompletedProcess[str]:
    code = (HIDE_PSUTIL if hide_psutil else "import sys\n") + RUN_ROTA
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60
    )


def test_rota_lists_the_bench_commands() -> None:
    listed = rota("bench", "--help")
    assert listed.returncode == 0, listed.stderr
    for command in ("throughput", "latency", "cron", "login-flood", "scaleout", "capacity"):
        assert command in listed.stdout


@pytest.mark.parametrize("command", ["throughput", "capacity", "scaleout"])
def test_without_the_extra_a_bench_says_how_to_install_it(command: str) -> None:
    refused = rota("bench", command, hide_psutil=True)
    assert refused.returncode == 2
    assert "pip install 'rota[bench]'" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_the_product_runs_without_the_extra() -> None:
    """The other commands need no psutil: ``rota --help`` and a job module load without it."""
    listed = rota("--help", hide_psutil=True)
    assert listed.returncode == 0, listed.stderr
    assert "bench" in listed.stdout
    code = HIDE_PSUTIL + "import rota.app.wiring, rota.worker.executor, rota_bench.jobs\n"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert loaded.returncode == 0, loaded.stderr
