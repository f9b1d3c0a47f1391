"""Recovery times measured by the fault tests, listed in pytest's terminal summary.

``recovery("RabbitMQ restarted: backlog done", 4.2)`` records one; the ``recovery times``
section at the end of the run lists them all in the order they were measured (CI output shows
them). Wired in through ``tests/e2e/conftest.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

RECOVERY_TIMES = pytest.StashKey[list[tuple[str, float]]]()

Recorder = Callable[[str, float], None]


@pytest.fixture
def recovery(request: pytest.FixtureRequest) -> Recorder:
    """A function recording ``(scenario, seconds)``."""
    times = request.config.stash.setdefault(RECOVERY_TIMES, [])

    def record(scenario: str, seconds: float) -> None:
        times.append((scenario, seconds))
        print(f"recovery: {scenario}: {seconds:.1f} s")

    return record


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    times = config.stash.get(RECOVERY_TIMES, [])
    if not times:
        return
    terminalreporter.section("recovery times")
    for scenario, seconds in times:
        terminalreporter.write_line(f"{seconds:7.1f} s  {scenario}")
