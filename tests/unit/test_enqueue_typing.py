"""The typed enqueue is checked by mypy: ``tests/typed/enqueue_checked.py`` must give exactly
the errors its ``# E:`` comments name (a wrong data type, a missing or unknown option, data
for a ``(ctx)`` handler), and its ``assert_type`` lines (the result types) must hold."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ROOT / "tests" / "typed" / "enqueue_checked.py"


def test_mypy_reads_data_and_result_types_from_the_handler() -> None:
    expected: dict[int, str] = {}
    for number, line in enumerate(CHECKED.read_text().splitlines(), start=1):
        if "# E: " in line:
            expected[number] = line.split("# E: ", 1)[1].strip()
    assert len(expected) >= 8
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "pyproject.toml", str(CHECKED)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    errors: dict[int, list[str]] = {}
    for match in re.finditer(r"^[^\n]*?:(\d+): error: ([^\n]*)$", done.stdout, flags=re.M):
        errors.setdefault(int(match.group(1)), []).append(match.group(2))
    assert done.returncode == 1, done.stdout + done.stderr
    assert sorted(errors) == sorted(expected), done.stdout
    for number, text in expected.items():
        assert any(text in error for error in errors[number]), (number, errors[number])
