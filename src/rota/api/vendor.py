"""The front-end libraries the dashboard and the API docs load from the package's vendor folder.

They are not in git: building the package (``hatch_build.py``, run by ``pip`` and ``python -m
build``) or ``make install`` copies them from the npm registry's packages. An installation made
without them (an editable install without ``make install``) would serve pages whose scripts are
missing: :func:`missing` names them, for the warning ``rota dev`` and ``rota server`` print at
start and for the docs pages' own error.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Final

DASHBOARD_FILES: Final = ("htmx.min.js", "sse.min.js", "uPlot.iife.min.js", "uPlot.min.css")
DOCS_FILES: Final = (
    "swagger-ui-bundle.js",
    "swagger-ui.css",
    "favicon-32x32.png",
    "redoc.standalone.js",
)
HOW_TO_FIX: Final = (
    "they come from the npm registry when the package is built: in a source checkout run "
    "`make install` (or `python hatch_build.py`), otherwise install a wheel built where npm was "
    "available (see docs/deployment.md)"
)


def vendor_dir() -> Path:
    return Path(str(resources.files("rota.dashboard") / "static" / "vendor"))


def missing(names: Iterable[str] = (*DASHBOARD_FILES, *DOCS_FILES)) -> list[str]:
    """Which of ``names`` (all the files by default) the vendor folder lacks."""
    vendor = vendor_dir()
    return [name for name in names if not (vendor / name).is_file()]


def missing_warning(*, dashboard: bool = True) -> str | None:
    """What to tell whoever starts a server whose dashboard (when served) or API docs lack their
    libraries, or ``None`` when nothing is missing."""
    parts = [("the dashboard", DASHBOARD_FILES)] if dashboard else []
    parts.append(("the API docs (/docs, /redoc)", DOCS_FILES))
    broken = [(what, lacking) for what, names in parts if (lacking := missing(names))]
    if not broken:
        return None
    said = "; ".join(f"{what} will not work: no {', '.join(lacking)}" for what, lacking in broken)
    return f"this installation of Rota lacks front-end files: {said} in {vendor_dir()}. " + (
        HOW_TO_FIX[0].upper() + HOW_TO_FIX[1:] + "."
    )
