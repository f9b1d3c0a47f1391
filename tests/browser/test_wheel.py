"""The package alone: an sdist and a wheel built from a clean clone (``python -m build``, which
builds the wheel from the sdist, as pip does from an sdist), installed alone in a new venv, serve
the whole dashboard and the API docs; the same installation with files taken out warns at start
and says what is missing on its pages.

The clone is of the repository's committed ``HEAD`` (what CI runs), not of the working tree. The
build fetches the front-end libraries with npm (``hatch_build.py``); pip's cache and npm's make
the build and the install a matter of seconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Response, expect

from tests.browser.conftest import ADMIN, ROOT, VIEWPORT, Server, _free_port, sign_in, wait_live

pytestmark = [pytest.mark.slow, pytest.mark.browser]

DASHBOARD_FILES = ("htmx.min.js", "sse.min.js", "uPlot.iife.min.js", "uPlot.min.css")
DOCS_FILES = ("swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png", "redoc.standalone.js")
VENDOR = "rota/dashboard/static/vendor"


def _run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, f"{command} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _clean_env() -> dict[str, str]:
    """This environment without what would let the venv's ``rota`` import the working tree."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def install_a_wheel_from_a_clean_clone(where: Path) -> Path:
    """A venv holding the wheel built from a clean clone of ``HEAD`` (and its dependencies,
    at the pins of ``constraints.txt``); returns its ``bin`` folder.

    The dependencies the clone's ``pyproject.toml`` declares are installed while the package is
    built (both wait on the network, not the CPU); installing the wheel then resolves its own
    metadata against them."""
    clone = where / "clone"
    _run(["git", "clone", "--quiet", "--depth", "1", f"file://{ROOT}", str(clone)], where)
    assert not (clone / "src" / VENDOR).exists()  # a clean clone has none of the files
    venv = where / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], where)
    # This venv's pip installs into the new one (--python): no pip of its own to bootstrap.
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install"]
    pip += ["--quiet", "-c", str(clone / "constraints.txt")]
    declared = tomllib.loads((clone / "pyproject.toml").read_text())["project"]["dependencies"]
    with (where / "deps.log").open("w") as deps_log:
        deps = subprocess.Popen(
            [*pip, *declared], cwd=where, env=_clean_env(), stdout=deps_log, stderr=deps_log
        )
        try:
            dist = where / "dist"
            build = [sys.executable, "-m", "build", "--outdir", str(dist), str(clone)]
            _run(build, where, _clean_env())
        finally:
            assert deps.wait(timeout=300) == 0, (where / "deps.log").read_text()

    (sdist,) = dist.glob("rota-*.tar.gz")
    with tarfile.open(sdist) as tar:
        in_sdist = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    assert {"package.json", "package-lock.json", "hatch_build.py"} <= in_sdist
    (wheel,) = dist.glob("rota-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        in_wheel = set(archive.namelist())
    assert {f"{VENDOR}/{name}" for name in (*DASHBOARD_FILES, *DOCS_FILES)} <= in_wheel
    assert not [name for name in in_wheel if "node_modules" in name or name.endswith(".copied")]

    _run([*pip, str(wheel)], where, _clean_env())
    found = _run([str(venv / "bin" / "python"), "-c", "import rota; print(rota.__file__)"], where)
    assert found.startswith(str(venv)), found  # the wheel's rota, not the working tree's
    return venv / "bin"


@contextmanager
def rota_dev(bin_dir: Path, data: Path) -> Iterator[tuple[str, Path]]:
    """The venv's ``rota dev`` on a free port with its own data dir, started outside the
    repository; yields its URL and its log."""
    data.mkdir()
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = data / "server.log"
    env = {**_clean_env(), "ROTA_ADMIN_USER": ADMIN[0], "ROTA_ADMIN_PASSWORD": ADMIN[1]}
    command = [str(bin_dir / "rota"), "dev", "--no-demo", "--port", str(port)]
    command += ["--data-dir", str(data), "--log-level", "warning"]
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=data, env=env, stdout=out, stderr=out)
        try:
            wait_live(process, url, log)
            yield url, log
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


# ~40 s on an idle machine (the build and the install wait on the package registries); the
# suite's 120 s would be tight on a loaded one.
@pytest.mark.timeout(300)
def test_a_wheel_from_a_clean_clone_serves_the_whole_dashboard(
    browser: Browser, tmp_path: Path
) -> None:
    """The wheel serves the dashboard (its libraries load: htmx, its SSE extension, uPlot) and
    the API docs. Then the same installation with files taken out (as one made without them
    would be): a warning at start, 503 docs pages naming what is missing, a notice on the
    sign-in page; no 500. (One test: the build and the install are done once.)"""
    installed = install_a_wheel_from_a_clean_clone(tmp_path)
    with rota_dev(installed, tmp_path / "whole") as (url, log):
        context = browser.new_context(viewport=VIEWPORT)
        page = context.new_page()
        vendor: dict[str, int] = {}

        def seen(response: Response) -> None:
            if "/vendor/" in response.url or "/docs/assets/" in response.url:
                vendor[response.url.rsplit("/", 1)[1]] = response.status

        page.on("response", seen)
        sign_in(page, Server(url=url), ADMIN)
        page.wait_for_function("() => window.htmx && htmx.version && window.uPlot")
        expect(page.get_by_test_id("missing-assets")).to_have_count(0)
        docs = page.goto(f"{url}/docs")
        assert docs is not None
        assert docs.status == 200
        expect(
            page.locator(".opblock-summary-path[data-path='/api/v1/jobs']").first
        ).to_be_visible()
        context.close()
        assert {name: vendor.get(name) for name in (*DASHBOARD_FILES, "swagger-ui-bundle.js")} == {
            name: 200 for name in (*DASHBOARD_FILES, "swagger-ui-bundle.js")
        }
        assert httpx.get(f"{url}/redoc", timeout=10).status_code == 200
        assert httpx.get(f"{url}/docs/assets/redoc.standalone.js", timeout=10).status_code == 200
    assert "lacks front-end files" not in log.read_text()

    package = Path(
        _run([str(installed / "python"), "-c", "import rota; print(rota.__file__)"], tmp_path)
    ).parent
    for name in ("htmx.min.js", "swagger-ui-bundle.js"):
        (package / "dashboard" / "static" / "vendor" / name).unlink()
    with rota_dev(installed, tmp_path / "broken") as (url, log):
        unavailable = httpx.get(f"{url}/docs", timeout=10)
        assert unavailable.status_code == 503
        assert "swagger-ui-bundle.js" in unavailable.text
        assert httpx.get(f"{url}/redoc", timeout=10).status_code == 503
        assert httpx.get(f"{url}/docs/assets/swagger-ui.css", timeout=10).status_code == 404
        context = browser.new_context(viewport=VIEWPORT)
        page = context.new_page()
        page.goto(f"{url}/login")
        expect(page.get_by_test_id("missing-assets")).to_contain_text("htmx.min.js")
        context.close()
    warning = log.read_text()
    assert "the dashboard will not work: no htmx.min.js" in warning
    assert "the API docs (/docs, /redoc) will not work: no swagger-ui-bundle.js" in warning
