"""Text the repository must never carry: merge conflict markers in docs and configuration."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^(<{7}|>{7}|={7})( |$)", re.MULTILINE)


def test_no_merge_conflict_markers() -> None:
    files = [
        ROOT / "README.md",
        *ROOT.glob("docs/**/*.md"),
        *ROOT.glob("*.yml"),
        *ROOT.glob("*.toml"),
    ]
    marked = [str(f.relative_to(ROOT)) for f in files if MARKER.search(f.read_text("utf-8"))]
    assert marked == []
