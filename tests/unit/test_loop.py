"""The loop that never dies (:func:`rota.services._loop.run_periodically`): a failing step is
logged and tried again, a kick wakes it early, stopping or cancelling ends it at once, and
failures back off. Waits are polls with a deadline; where the delays themselves are checked,
a recording ``sleep`` stands in for the clock."""

from __future__ import annotations

import asyncio
import logging

import pytest

from rota.core.errors import BackendUnavailableError
from rota.core.timing import PHASE, off_the_second
from rota.services._loop import Backoff, run_periodically
from tests.helpers import eventually

log = logging.getLogger("tests.loop")
LONG = 60.0
"""An interval no test waits out: a pass that comes sooner was woken."""


class Steps:
    """A step that counts its passes; the first ones raise the given errors in turn (``None``:
    that pass succeeds)."""

    def __init__(self, *errors: Exception | None) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> None:
        self.calls += 1
        error = self.errors.pop(0) if self.errors else None
        if error is not None:
            raise error


async def finish(task: asyncio.Task[None]) -> None:
    await asyncio.wait_for(task, timeout=5)


async def test_an_unexpected_error_is_logged_with_its_traceback_and_the_loop_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    steps = Steps(RuntimeError("boom"))
    stopping = asyncio.Event()
    errors: list[None] = []
    task = asyncio.create_task(
        run_periodically(
            "thing", steps, 0.01, stopping, log=log, on_error=lambda: errors.append(None)
        )
    )
    await eventually(lambda: steps.calls >= 3, 10, "passes after the error")
    stopping.set()
    await finish(task)
    [record] = [r for r in caplog.records if r.name == "tests.loop"]
    assert record.levelno == logging.ERROR
    assert record.getMessage().startswith("unexpected thing error")
    assert record.exc_info is not None
    assert str(record.exc_info[1]) == "boom"
    assert len(errors) == 1


async def test_an_expected_error_is_a_warning_without_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    steps = Steps(BackendUnavailableError("store away"), OSError("reset"))
    stopping = asyncio.Event()
    task = asyncio.create_task(run_periodically("thing", steps, 0.01, stopping, log=log))
    await eventually(lambda: steps.calls >= 3, 10, "passes after the errors")
    stopping.set()
    await finish(task)
    records = [r for r in caplog.records if r.name == "tests.loop"]
    assert [r.levelno for r in records] == [logging.WARNING, logging.WARNING]
    assert all(r.exc_info is None for r in records)
    assert "thing failed" in records[0].getMessage()
    assert "store away" in records[0].getMessage()


async def test_expected_chooses_which_errors_are_only_warnings(
    caplog: pytest.LogCaptureFixture,
) -> None:
    steps = Steps(OSError("reset"))
    stopping = asyncio.Event()
    task = asyncio.create_task(
        run_periodically("thing", steps, 0.01, stopping, log=log, expected=())
    )
    await eventually(lambda: steps.calls >= 2, 10, "a pass after the error")
    stopping.set()
    await finish(task)
    [record] = [r for r in caplog.records if r.name == "tests.loop"]
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None


async def test_expected_level_sets_the_level_expected_errors_are_logged_at(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="tests.loop")
    steps = Steps(OSError("reset"), RuntimeError("boom"))
    stopping = asyncio.Event()
    task = asyncio.create_task(
        run_periodically("thing", steps, 0.01, stopping, log=log, expected_level=logging.DEBUG)
    )
    await eventually(lambda: steps.calls >= 3, 10, "passes after the errors")
    stopping.set()
    await finish(task)
    records = [r for r in caplog.records if r.name == "tests.loop"]
    assert [r.levelno for r in records] == [logging.DEBUG, logging.ERROR]
    assert records[0].exc_info is None
    assert "thing failed" in records[0].getMessage()
    assert "reset" in records[0].getMessage()


async def test_a_kick_wakes_it_early_and_is_cleared_before_the_pass() -> None:
    stopping, kick = asyncio.Event(), asyncio.Event()
    seen: list[bool] = []

    async def step() -> None:
        seen.append(kick.is_set())

    task = asyncio.create_task(run_periodically("thing", step, LONG, stopping, kick, log=log))
    await eventually(lambda: len(seen) == 1, 10, "the first pass")
    kick.set()
    await eventually(lambda: len(seen) == 2, 10, "the pass the kick asked for")
    assert seen == [False, False]
    assert not kick.is_set()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await finish(task)


async def test_a_kick_during_a_pass_starts_the_next_one_at_once() -> None:
    stopping, kick = asyncio.Event(), asyncio.Event()
    passes = 0

    async def step() -> None:
        nonlocal passes
        passes += 1
        if passes == 1:
            kick.set()  # work came in while this pass ran

    task = asyncio.create_task(run_periodically("thing", step, LONG, stopping, kick, log=log))
    await eventually(lambda: passes == 2, 10, "the second pass")
    stopping.set()
    await finish(task)


@pytest.mark.parametrize("with_kick", [False, True])
async def test_stopping_ends_the_wait_at_once(with_kick: bool) -> None:
    steps = Steps()
    stopping = asyncio.Event()
    kick = asyncio.Event() if with_kick else None
    task = asyncio.create_task(run_periodically("thing", steps, LONG, stopping, kick, log=log))
    await eventually(lambda: steps.calls == 1, 10, "the first pass")
    stopping.set()
    await finish(task)
    assert steps.calls == 1


async def test_stopping_during_a_pass_ends_it_after_the_pass() -> None:
    stopping = asyncio.Event()
    passes = 0

    async def step() -> None:
        nonlocal passes
        passes += 1
        stopping.set()

    await finish(asyncio.create_task(run_periodically("thing", step, 0.0, stopping, log=log)))
    assert passes == 1


async def test_a_set_stopping_event_runs_no_pass() -> None:
    steps = Steps()
    stopping = asyncio.Event()
    stopping.set()
    await finish(asyncio.create_task(run_periodically("thing", steps, 0.0, stopping, log=log)))
    assert steps.calls == 0


@pytest.mark.parametrize("with_kick", [False, True])
async def test_cancellation_ends_it_and_leaves_no_task_behind(with_kick: bool) -> None:
    steps = Steps()
    kick = asyncio.Event() if with_kick else None
    task = asyncio.create_task(
        run_periodically("thing", steps, LONG, asyncio.Event(), kick, log=log)
    )
    await eventually(lambda: steps.calls == 1, 10, "the first pass")
    before = asyncio.all_tasks()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await finish(task)
    assert {t for t in asyncio.all_tasks() if not t.done()} <= before - {task}


async def test_cancellation_during_a_pass_is_not_swallowed() -> None:
    started = asyncio.Event()

    async def step() -> None:
        started.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(run_periodically("thing", step, 0.0, asyncio.Event(), log=log))
    await asyncio.wait_for(started.wait(), timeout=5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await finish(task)


class Clock:
    """A ``sleep`` that records the delays asked for and stops the loop after ``passes``."""

    def __init__(self, stopping: asyncio.Event, steps: Steps, passes: int) -> None:
        self.delays: list[float] = []
        self._stopping = stopping
        self._steps = steps
        self._passes = passes

    async def sleep(self, delay: float) -> None:
        self.delays.append(delay)
        if self._steps.calls >= self._passes:
            self._stopping.set()
        await asyncio.sleep(0)


async def test_failures_back_off_exponentially_up_to_the_cap_and_a_success_resets_it() -> None:
    down = BackendUnavailableError("down")
    steps = Steps(down, down, down, down, None, RuntimeError("bug"))
    stopping = asyncio.Event()
    clock = Clock(stopping, steps, passes=7)
    await run_periodically(
        "thing", steps, 10.0, stopping, log=log, backoff=Backoff(0.1, 0.4), sleep=clock.sleep
    )
    # Down four times (0.1, 0.2, 0.4, capped 0.4), a success (the interval, and the backoff
    # starts over), an unexpected error (backed off like the others), a success.
    assert clock.delays == [0.1, 0.2, 0.4, 0.4, 10.0, 0.1, 10.0]


async def test_an_unexpected_delay_leaves_the_backoff_as_it_is() -> None:
    down = BackendUnavailableError("down")
    steps = Steps(down, RuntimeError("bug"), down)
    stopping = asyncio.Event()
    clock = Clock(stopping, steps, passes=3)
    await run_periodically(
        "thing",
        steps,
        0.0,
        stopping,
        log=log,
        backoff=Backoff(0.1, 5.0),
        unexpected_delay=1.0,
        sleep=clock.sleep,
    )
    assert clock.delays == [0.1, 1.0, 0.2]


async def test_without_a_backoff_a_failure_waits_the_interval_asked_each_time() -> None:
    steps = Steps(BackendUnavailableError("down"))
    stopping = asyncio.Event()
    clock = Clock(stopping, steps, passes=3)
    intervals = iter([1.0, 2.0, 3.0, 4.0])
    await run_periodically(
        "thing", steps, lambda: next(intervals), stopping, log=log, sleep=clock.sleep
    )
    assert clock.delays == [1.0, 2.0, 3.0]


async def test_wait_first_waits_an_interval_before_the_first_pass() -> None:
    steps = Steps()
    stopping = asyncio.Event()
    clock = Clock(stopping, steps, passes=1)
    calls_at_first_sleep: list[int] = []

    async def sleep(delay: float) -> None:
        calls_at_first_sleep.append(steps.calls)
        await clock.sleep(delay)

    await run_periodically("thing", steps, 5.0, stopping, log=log, wait_first=True, sleep=sleep)
    assert calls_at_first_sleep[0] == 0
    assert clock.delays == [5.0, 5.0]
    assert steps.calls == 1


def test_backoff_doubles_up_to_its_cap_and_resets() -> None:
    backoff = Backoff(0.05, 0.3)
    assert [backoff.next() for _ in range(5)] == [0.05, 0.1, 0.2, 0.3, 0.3]
    backoff.reset()
    assert backoff.next() == 0.05


@pytest.mark.parametrize("now", [1000.0, 1000.1, 1000.25, 1000.6, 1000.99])
@pytest.mark.parametrize("delay", [1.0, 2.0, 15.0, 3600.0])
def test_a_wait_of_a_second_or_more_ends_a_quarter_past_a_second(now: float, delay: float) -> None:
    waited = off_the_second(delay, now=lambda: now)
    assert abs((now + waited) % 1.0 - PHASE) < 1e-9
    assert abs(waited - delay) <= 0.5 + 1e-9


def test_a_wait_under_a_second_is_left_as_it_is() -> None:
    assert off_the_second(0.02, now=lambda: 1000.9) == 0.02
    assert off_the_second(0.999, now=lambda: 1000.3) == 0.999
