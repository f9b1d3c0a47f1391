"""Recovery times measured by the fault tests, listed in pytest's terminal summary.

``recovery("RabbitMQ restarted: backlog done", 4.2)`` records one; the ``recovery times``
section at the end of the run lists them all in the order their tests ended (CI output shows
them). A time travels with its test's report (``user_properties``), so the summary also has
those measured in pytest-xdist's worker processes. Wired in through ``tests/e2e/conftest.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

RECOVERY = "recovery"
"""The name of a recovery time in a test's ``user_properties``: ``(scenario, seconds)``."""

Recorder = Callable[[str, float], None]


@pytest.fixture
def recovery(request: pytest.FixtureRequest) -> Recorder:
    """A function recording ``(scenario, seconds)``."""

    def record(scenario: str, seconds: float) -> None:
        request.node.user_properties.append((RECOVERY, (scenario, seconds)))
        print(f"recovery: {scenario}: {seconds:.1f} s")

    return record


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    times = [
        value
        for reports in terminalreporter.stats.values()
        for report in reports
        if getattr(report, "when", None) == "teardown"
        for name, value in report.user_properties
        if name == RECOVERY
    ]
    if not times:
        return
    terminalreporter.section("recovery times")
    for scenario, seconds in times:
        terminalreporter.write_line(f"{seconds:7.1f} s  {scenario}")
