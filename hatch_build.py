"""The front-end libraries of the dashboard and of the API docs, put into the package before it is
built.

They come from the npm registry at the versions ``package-lock.json`` pins, are copied into
``src/rota/dashboard/static/vendor/`` (git-ignored) and travel in the sdist and the wheel. Two
ways in:

- as hatchling's build hook (``[tool.hatch.build.hooks.custom]`` in ``pyproject.toml``): an sdist
  or a wheel built without them (a clean checkout, ``pip install git+…``) fetches them with npm
  first; without npm the build fails, naming what is missing and how to get it, rather than
  making a package whose dashboard and docs do not load. An editable install
  (``pip install -e .``) is left alone: ``make install`` copies them after it, and ``rota dev``
  warns at start when they are missing.
- as a script, ``python hatch_build.py`` (what ``make install`` runs): fetch and copy them.

ReDoc is one file of the ``redoc`` package, whose ~100 dependencies ``npm ci`` would install
too: it is an optional dependency ``npm ci`` leaves out, and its tarball is fetched alone
(``npm pack``) and checked against the integrity ``package-lock.json`` pins. Standard library
only, so that the script runs with any Python 3.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # run as a script, outside a build
    BuildHookInterface = object  # type: ignore[assignment,misc]

VENDOR = Path("src", "rota", "dashboard", "static", "vendor")
STAMP = ".copied"
"""Written last in the vendor folder: when it is older than ``package.json`` or
``package-lock.json``, the files are copied again."""

FROM_NODE_MODULES = {
    # the dashboard
    "htmx.min.js": "htmx.org/dist/htmx.min.js",
    "sse.min.js": "htmx-ext-sse/dist/sse.min.js",
    "uPlot.iife.min.js": "uplot/dist/uPlot.iife.min.js",
    "uPlot.min.css": "uplot/dist/uPlot.min.css",
    # the API docs (/docs)
    "swagger-ui-bundle.js": "swagger-ui-dist/swagger-ui-bundle.js",
    "swagger-ui.css": "swagger-ui-dist/swagger-ui.css",
    "favicon-32x32.png": "swagger-ui-dist/favicon-32x32.png",
}
REDOC = "redoc.standalone.js"
"""The API docs' /redoc, from the ``redoc`` tarball's ``package/bundles/``."""
FILES = (*FROM_NODE_MODULES, REDOC)

NPM_CI = ["npm", "ci", "--ignore-scripts", "--omit=optional", "--no-audit", "--no-fund"]
HOW_TO_FIX = (
    "Rota's package carries the front-end libraries of its dashboard and API docs, fetched from "
    "the npm registry while it is built: install npm (apt-get install npm, or Node.js from "
    "nodejs.org) and build again, or copy them in first with `python hatch_build.py` in the "
    "source tree, where npm is."
)


class AssetsError(Exception):
    """The assets could not be fetched; the message says what is missing and how to fix it."""


def missing(root: Path) -> list[str]:
    """The vendor files not in ``root``'s vendor folder."""
    vendor = root / VENDOR
    return [name for name in FILES if not (vendor / name).is_file()]


def stale(root: Path) -> bool:
    """The files were copied (by this script) before the pins last changed."""
    stamp = root / VENDOR / STAMP
    if not stamp.is_file():
        return False  # an unpacked sdist: the files came with it
    pins = [
        root / name for name in ("package.json", "package-lock.json") if (root / name).is_file()
    ]
    return any(pin.stat().st_mtime > stamp.stat().st_mtime for pin in pins)


def fetch(root: Path, say: Any = print) -> None:
    """``npm ci`` in ``root``, then the files copied into the vendor folder (and the stamp)."""
    lock = root / "package-lock.json"
    if not lock.is_file() or not (root / "package.json").is_file():
        raise AssetsError(
            f"{root} has no package.json or package-lock.json, which pin the front-end "
            f"libraries to fetch. {HOW_TO_FIX}"
        )
    npm = shutil.which("npm")
    if npm is None:
        raise AssetsError(f"npm is not on PATH. {HOW_TO_FIX}")
    say(f"fetching the front-end libraries with npm into {VENDOR}")
    _run([npm, *NPM_CI[1:], "--loglevel=error"], root)
    vendor = root / VENDOR
    vendor.mkdir(parents=True, exist_ok=True)
    for name, source in FROM_NODE_MODULES.items():
        shutil.copyfile(root / "node_modules" / source, vendor / name)
    pin = json.loads(lock.read_text())["packages"]["node_modules/redoc"]
    say(f"npm pack redoc@{pin['version']} ({REDOC})")
    (vendor / REDOC).write_bytes(_redoc_bundle(npm, pin["version"], pin["integrity"]))
    (vendor / STAMP).touch()


def _redoc_bundle(npm: str, version: str, integrity: str) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        packed = _run([npm, "pack", f"redoc@{version}", "--json", "--loglevel=error"], Path(tmp))
        tarball = (Path(tmp) / json.loads(packed)[0]["filename"]).read_bytes()
    algorithm, _, expected = integrity.partition("-")
    got = base64.b64encode(hashlib.new(algorithm, tarball).digest()).decode()
    if got != expected:
        raise AssetsError(
            f"redoc@{version} has integrity {algorithm}-{got}, package-lock.json pins {integrity}"
        )
    with tarfile.open(fileobj=io.BytesIO(tarball)) as tar:
        member = tar.extractfile(f"package/bundles/{REDOC}")
        if member is None:
            raise AssetsError(f"redoc@{version} has no bundles/{REDOC}")
        return member.read()


def _run(command: list[str], cwd: Path) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise AssetsError(
            f"`{' '.join(command)}` failed (exit {done.returncode}) in {cwd}:\n"
            f"{done.stderr.strip() or done.stdout.strip()}\n{HOW_TO_FIX}"
        )
    return done.stdout


def ensure(root: Path, say: Any = print) -> None:
    """Fetch the files when one is missing or the pins changed since they were copied; after it,
    every file is there or :class:`AssetsError` says why not."""
    if missing(root) or stale(root):
        fetch(root, say)
    still = missing(root)
    if still:
        raise AssetsError(f"{root / VENDOR} lacks {', '.join(still)}. {HOW_TO_FIX}")


class VendorAssetsHook(BuildHookInterface):  # type: ignore[misc]
    """Every sdist and wheel carries the vendor files (``artifacts`` in ``pyproject.toml``: they
    are git-ignored); an editable install is left alone."""

    PLUGIN_NAME = "vendor-assets"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if version == "editable":
            return
        root = Path(self.root)
        try:
            ensure(root, self.app.display_info)
        except AssetsError as exc:
            self.app.display_error(f"rota: cannot build the {self.target_name}: {exc}")
            raise SystemExit(1) from exc


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    try:
        fetch(here)
        ensure(here)
    except AssetsError as exc:
        sys.exit(f"hatch_build.py: {exc}")
