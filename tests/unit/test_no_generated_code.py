"""No code generated at run time in the package: no ``exec`` or ``eval`` of a built string
(issue 34: a fast twin built that way is a second path to keep in step with the first)."""

from __future__ import annotations

import ast
from pathlib import Path

import rota

SRC = Path(rota.__file__).parent


def _calls_of(name: str) -> list[str]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == name
            ):
                found.append(f"{path.relative_to(SRC)}:{node.lineno}")
    return found


def test_the_package_has_python_files() -> None:
    assert len(list(SRC.rglob("*.py"))) > 50


def test_no_exec_or_eval() -> None:
    assert _calls_of("exec") == []
    assert _calls_of("eval") == []
