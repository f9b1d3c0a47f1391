"""The dashboard works under any mount prefix (``docs/embedding.md``): no template holds one of
the app's paths without the prefix in front (``{{ root }}``), and the page's script builds its
own paths on ``ROOT``. A static check of every template, beside the pages rendered under
``/rota`` in ``tests/integration/test_embedding.py``."""

from __future__ import annotations

import re
from pathlib import Path

DASHBOARD = Path(__file__).resolve().parents[2] / "src" / "rota" / "dashboard"

BARE_URL = re.compile(
    r'\s(href|src|action|hx-[a-z]+|sse-connect|data-[a-z-]+)="'
    r'(?:(?:GET|POST|PUT|PATCH|DELETE) )?/[^"]*"'
)
"""An attribute holding a path of the app as written, without the prefix."""

BARE_SCRIPT_PATH = re.compile(r"""(?<!ROOT \+ )["'`]/(ui|api|login|jobs|executions|static)\b""")


def test_no_template_holds_a_path_without_the_prefix() -> None:
    found = [
        f"{path.name}: {match.group(0).strip()}"
        for path in sorted((DASHBOARD / "templates").glob("*.html"))
        for match in BARE_URL.finditer(path.read_text())
    ]
    assert found == []


def test_the_script_puts_the_prefix_before_its_own_paths() -> None:
    script = (DASHBOARD / "static" / "rota.js").read_text()
    assert "const ROOT" in script
    assert BARE_SCRIPT_PATH.findall(script) == []


def test_the_check_sees_a_bare_path() -> None:
    assert BARE_URL.search(' <a href="/jobs">') is not None
    assert BARE_URL.search(' <button data-api="POST /api/v1/x">') is not None
    assert BARE_URL.search(' <a href="{{ root }}/jobs">') is None
    assert BARE_SCRIPT_PATH.search('fetch("/ui/session/refresh")') is not None
    assert BARE_SCRIPT_PATH.search('fetch(ROOT + "/ui/session/refresh")') is None
