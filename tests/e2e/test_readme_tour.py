"""The README's five-minute tour run as written: its REST API tour (curl) and its CLI tour,
every command in order, against a fresh ``rota dev`` started as ``make run`` starts it (demo
jobs, the Admin login printed on the console, fed to the tours as a user types it). Only the
address changes (a free port instead of 8000) and ``.venv/bin/rota`` is this environment's."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .conftest import HERE, free_port, wait_until

pytestmark = pytest.mark.slow

ROOT = HERE.parents[1]
PASSWORD = re.compile(r"password: (\S+)")


def tour_blocks(readme: str) -> list[str]:
    """The ```bash blocks of the README's "A five-minute tour", before "Your own jobs"."""
    start = readme.index("## A five-minute tour")
    end = readme.index("### Your own jobs", start)
    return re.findall(r"```bash\n(.*?)```", readme[start:end], re.DOTALL)


def test_the_readme_has_the_two_tours() -> None:
    curl, cli = tour_blocks((ROOT / "README.md").read_text())
    assert "THE-PRINTED-PASSWORD" in curl
    assert "/api/v1/jobs" in curl
    assert cli.startswith(".venv/bin/rota login")


class Dev:
    """``rota dev`` in a directory of its own, as ``make run`` runs it there."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.console = workdir / "console.log"
        self.env = {
            k: v for k, v in os.environ.items() if not k.startswith(("ROTA_", "XDG_CONFIG"))
        }
        self.env["XDG_CONFIG_HOME"] = str(workdir / "config")
        rota = Path(sys.executable).parent / "rota"
        with self.console.open("wb") as out:
            self.process = subprocess.Popen(
                [str(rota), "dev", "--port", str(self.port)],
                cwd=workdir,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        (workdir / ".venv" / "bin").mkdir(parents=True)
        (workdir / ".venv" / "bin" / "rota").symlink_to(rota)

    def text(self) -> str:
        return self.console.read_text(errors="replace")

    def password(self) -> str:
        found = PASSWORD.search(self.text())
        assert found, f"no printed login: {self.text()}"
        return found.group(1)

    def run(self, block: str, stdin: str = "") -> str:
        """One block of the tour as a bash script that stops at the first failing command; what
        it printed (stdout, then the commands and messages on stderr)."""
        script = block.replace("localhost:8000", f"127.0.0.1:{self.port}")
        script = script.replace("127.0.0.1:8000", f"127.0.0.1:{self.port}")
        script = script.replace("THE-PRINTED-PASSWORD", self.password())
        # setsid: no terminal, as in CI; `rota login` then reads the typed password from stdin
        done = subprocess.run(
            ["setsid", "bash", "-euo", "pipefail", "-x", "-c", script],
            cwd=self.workdir,
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, (
            f"exit {done.returncode}\n{done.stderr[-4000:]}\n{done.stdout[-2000:]}\n"
            f"console:\n{self.text()[-3000:]}"
        )
        return done.stdout + done.stderr


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[Dev]:
    assert shutil.which("setsid"), "the tour needs setsid"
    assert shutil.which("curl"), "the tour needs curl"
    instance = Dev(tmp_path)
    try:
        yield instance
    finally:
        instance.process.terminate()
        instance.process.wait(30)


def test_the_readme_tours_run_as_written(dev: Dev) -> None:
    curl, cli = tour_blocks((ROOT / "README.md").read_text())
    # what a user waits for before the tour: the URL, the login, a finished execution
    wait_until(
        lambda: "password:" in dev.text() and "Completed in" in dev.text(),
        60,
        f"rota dev did not come up: {dev.text()}",
    )
    out = dev.run(curl)
    assert '"displayName":"every second"' in out  # the created job, as the API answered
    assert '"statusChangeLogs"' in out  # an occurrence in detail
    assert '"reason":"tour"' in out  # the trigger's answer

    out = dev.run(cli, stdin=dev.password() + "\n")
    assert "run ended Completed" in out  # trigger --wait
    assert "nightly heartbeat" in out

    # what the tours made, as the API sees it
    base = f"http://127.0.0.1:{dev.port}/api/v1"
    token = httpx.post(
        f"{base}/auth/login", json={"username": "admin", "password": dev.password()}
    ).json()["accessToken"]
    headers = {"Authorization": f"Bearer {token}"}
    jobs = httpx.get(f"{base}/jobs", params={"limit": 100}, headers=headers).json()["items"]
    names = sorted(j["displayName"] for j in jobs)
    assert "every second" in names
    assert "nightly heartbeat" in names
    triggered = httpx.get(f"{base}/occurrences", params={"limit": 100}, headers=headers).json()[
        "items"
    ]
    assert sum(1 for o in triggered if o.get("triggerReason") == "tour") >= 2, triggered
