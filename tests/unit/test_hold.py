"""The worker's hold: deliveries sent ahead of their due time wait on a timer until it."""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from rota.core.ids import new_id
from rota.core.models import JobMessage
from rota.worker.hold import (
    FINE,
    MAX_HOLD,
    READY,
    SPIN,
    Entry,
    Hold,
    collect_young_if_half_full,
)

DUE = datetime(2026, 1, 5, 12, 0, 0, tzinfo=UTC)


@dataclass
class FakeDelivery:
    message: JobMessage
    is_live: bool = True
    redelivered: bool = False


@dataclass
class FakeTimer:
    """Records what is armed; the test fires it by hand."""

    armed: list[tuple[float, Callable[[], None], list[bool]]] = field(default_factory=list)

    def __call__(self, delay: float, callback: Callable[[], None]) -> Any:
        cancelled = [False]
        self.armed.append((delay, callback, cancelled))

        class Handle:
            def cancel(self) -> None:
                cancelled[0] = True

        return Handle()

    def fire_last(self) -> float:
        delay, callback, cancelled = self.armed[-1]
        assert not cancelled[0]
        callback()
        return delay


class Clock:
    def __init__(self, at: datetime) -> None:
        self.now = at.timestamp()

    def __call__(self) -> float:
        return self.now


def message(at: datetime = DUE, attempt: int = 1, oid: Any = None, version: int = 1) -> JobMessage:
    return JobMessage(
        job_version=version,
        occurrence_id=oid or new_id(),
        job_id=new_id(),
        job_type="t",
        job_data=None,
        scheduled_for=at,
        timestamp=at,
        retry_count=attempt - 1,
    )


def make(clock: Clock, timer: FakeTimer) -> tuple[Hold, list[Any], list[Any]]:
    released: list[Any] = []
    dropped: list[Any] = []
    hold = Hold(release=released.append, drop=dropped.append, wall=clock, timer=timer)
    return hold, released, dropped


def test_a_due_delivery_is_not_held() -> None:
    clock, timer = Clock(DUE), FakeTimer()
    hold, _, _ = make(clock, timer)
    assert not hold.hold(FakeDelivery(message()))  # type: ignore[arg-type]
    assert not hold.hold(FakeDelivery(message(DUE - timedelta(seconds=3))))  # type: ignore[arg-type]
    assert len(hold) == 0
    assert timer.armed == []


def test_an_early_delivery_starts_at_its_due_instant_not_before() -> None:
    clock, timer = Clock(DUE - timedelta(milliseconds=500)), FakeTimer()
    hold, released, _ = make(clock, timer)
    delivery = FakeDelivery(message())
    assert hold.hold(delivery)  # type: ignore[arg-type]
    assert len(hold) == 1
    assert abs(timer.armed[-1][0] - (0.5 - SPIN)) < 1e-6  # armed SPIN early
    clock.now = DUE.timestamp() - SPIN + 0.0001
    timer.fire_last()
    assert released == []  # still early: armed once more, FINE before the instant
    assert abs(timer.armed[-1][0] - (SPIN - 0.0001 - FINE)) < 1e-6
    clock.now = DUE.timestamp() - FINE - 0.0005  # that timer woke early: armed again
    timer.fire_last()
    assert released == []
    assert abs(timer.armed[-1][0] - 0.0005) < 1e-6
    clock.now = DUE.timestamp() - FINE
    timer.fire_last()
    assert released == []  # the rest is spun: on the next turn
    assert timer.armed[-1][0] < 1e-6
    clock.now = DUE.timestamp() - 0.0001
    timer.fire_last()
    assert released == []
    clock.now = DUE.timestamp()
    timer.fire_last()
    assert released == [delivery]
    assert len(hold) == 0


def hold_new(hold: Hold, count: int) -> list[FakeDelivery]:
    """``count`` new deliveries due at ``DUE``, each taken by ``hold``."""
    deliveries = [FakeDelivery(message()) for _ in range(count)]
    for d in deliveries:
        assert hold.hold(d)  # type: ignore[arg-type]
    return deliveries


def test_deliveries_due_together_share_one_timer() -> None:
    clock, timer = Clock(DUE - timedelta(seconds=1)), FakeTimer()
    hold, released, _ = make(clock, timer)
    deliveries = hold_new(hold, 5)
    assert len(timer.armed) == 1
    clock.now = DUE.timestamp() + 0.0001
    timer.fire_last()
    assert released == deliveries


def test_a_taken_delivery_is_not_released() -> None:
    clock, timer = Clock(DUE - timedelta(seconds=1)), FakeTimer()
    hold, released, _ = make(clock, timer)
    kept, cancelled = FakeDelivery(message()), FakeDelivery(message())
    hold.hold(kept)  # type: ignore[arg-type]
    hold.hold(cancelled)  # type: ignore[arg-type]
    assert hold.take(cancelled.message.occurrence_id) is cancelled
    assert hold.take(cancelled.message.occurrence_id) is None
    clock.now = DUE.timestamp()
    timer.fire_last()
    assert released == [kept]


def test_the_last_taken_delivery_cancels_its_timer() -> None:
    clock, timer = Clock(DUE - timedelta(seconds=1)), FakeTimer()
    hold, _, _ = make(clock, timer)
    d = FakeDelivery(message())
    hold.hold(d)  # type: ignore[arg-type]
    hold.take(d.message.occurrence_id)
    assert timer.armed[-1][2] == [True]


def test_take_all_empties_the_hold() -> None:
    clock, timer = Clock(DUE - timedelta(seconds=1)), FakeTimer()
    hold, released, _ = make(clock, timer)
    ds = [FakeDelivery(message(DUE + timedelta(seconds=i))) for i in range(3)]
    for d in ds:
        hold.hold(d)  # type: ignore[arg-type]
    assert hold.take_all() == ds
    assert len(hold) == 0
    assert all(c == [True] for _, _, c in timer.armed)
    assert released == []


def test_a_copy_of_a_held_occurrence_keeps_the_later_attempt() -> None:
    clock, timer = Clock(DUE - timedelta(seconds=1)), FakeTimer()
    hold, released, dropped = make(clock, timer)
    oid = new_id()
    first = FakeDelivery(message(oid=oid))
    copy = FakeDelivery(message(oid=oid))
    older = FakeDelivery(message(oid=oid, attempt=0 + 1))
    hold.hold(first)  # type: ignore[arg-type]
    hold.hold(copy)  # type: ignore[arg-type]
    assert dropped == [first]
    assert len(hold) == 1
    later = FakeDelivery(message(oid=oid, attempt=2))
    hold.hold(later)  # type: ignore[arg-type]
    hold.hold(older)  # type: ignore[arg-type]
    assert dropped == [first, copy, older]
    clock.now = DUE.timestamp()
    timer.fire_last()
    assert released == [later]


def test_a_copy_of_a_later_job_version_supersedes_the_held_one() -> None:
    """The job was edited before the due time and its message sent again: the copy of the
    new version is the one held, whichever of the two comes first."""
    clock, timer = Clock(DUE - timedelta(seconds=1)), FakeTimer()
    hold, released, dropped = make(clock, timer)
    oid = new_id()
    old = FakeDelivery(message(oid=oid, version=1))
    new = FakeDelivery(message(oid=oid, version=2))
    hold.hold(old)  # type: ignore[arg-type]
    hold.hold(new)  # type: ignore[arg-type]
    late_old = FakeDelivery(message(oid=oid, version=1))
    hold.hold(late_old)  # type: ignore[arg-type]
    assert dropped == [old, late_old]
    assert hold.get(oid) is new
    clock.now = DUE.timestamp()
    timer.fire_last()
    assert released == [new]
    assert hold.get(oid) is None


def test_a_delivery_due_too_far_ahead_is_not_held() -> None:
    clock, timer = Clock(DUE - timedelta(seconds=MAX_HOLD + 1)), FakeTimer()
    hold, _, _ = make(clock, timer)
    assert not hold.hold(FakeDelivery(message()))  # type: ignore[arg-type]


# --- a group readied ahead and released at once ----------------------------------------------


class Readied:
    """A ``ready`` and ``release_group`` pair that records what they were given."""

    def __init__(self) -> None:
        self.readied: list[list[Any]] = []
        self.groups: list[list[tuple[Any, object]]] = []

    def ready(self, deliveries: list[Any]) -> list[object]:
        self.readied.append(list(deliveries))
        return [f"token {d.message.occurrence_id}" for d in deliveries]

    def release_group(self, entries: list[Entry]) -> None:
        self.groups.append([(e.delivery, e.token) for e in entries])


def make_readied(clock: Clock, timer: FakeTimer) -> tuple[Hold, Readied, list[Any]]:
    seen, released = Readied(), []
    hold = Hold(
        release=released.append,
        drop=lambda _: None,
        ready=seen.ready,
        release_group=seen.release_group,
        wall=clock,
        timer=timer,
    )
    return hold, seen, released


def test_a_group_is_readied_once_ahead_and_released_with_its_tokens_at_once() -> None:
    clock, timer = Clock(DUE - timedelta(seconds=1)), FakeTimer()
    hold, seen, released = make_readied(clock, timer)
    deliveries = hold_new(hold, 3)
    assert abs(timer.armed[-1][0] - (1 - SPIN - READY)) < 1e-6  # armed to ready first
    clock.now = DUE.timestamp() - SPIN - READY
    timer.fire_last()
    assert seen.readied == [deliveries]
    assert seen.groups == []
    assert abs(timer.armed[-1][0] - READY) < 1e-6  # then armed a spin before the instant
    clock.now = DUE.timestamp() - 0.0001
    timer.fire_last()
    assert seen.readied == [deliveries]
    assert seen.groups == []
    clock.now = DUE.timestamp()
    timer.fire_last()
    tokens = [f"token {d.message.occurrence_id}" for d in deliveries]
    assert seen.groups == [list(zip(deliveries, tokens, strict=True))]
    assert released == []  # the group went to release_group, not one by one
    assert len(hold) == 0


def test_a_delivery_held_after_its_group_was_readied_is_readied_on_arrival() -> None:
    clock, timer = Clock(DUE - timedelta(seconds=1)), FakeTimer()
    hold, seen, _ = make_readied(clock, timer)
    first, late = FakeDelivery(message()), FakeDelivery(message())
    hold.hold(first)  # type: ignore[arg-type]
    clock.now = DUE.timestamp() - SPIN - READY
    timer.fire_last()
    clock.now = DUE.timestamp() - SPIN
    hold.hold(late)  # type: ignore[arg-type]
    assert seen.readied == [[first], [late]]
    clock.now = DUE.timestamp()
    timer.fire_last()
    assert [token for _, token in seen.groups[0]] == [
        f"token {first.message.occurrence_id}",
        f"token {late.message.occurrence_id}",
    ]


def test_a_delivery_taken_after_the_group_was_readied_is_not_released() -> None:
    clock, timer = Clock(DUE - timedelta(seconds=1)), FakeTimer()
    hold, seen, _ = make_readied(clock, timer)
    kept, cancelled = FakeDelivery(message()), FakeDelivery(message())
    hold.hold(kept)  # type: ignore[arg-type]
    hold.hold(cancelled)  # type: ignore[arg-type]
    clock.now = DUE.timestamp() - SPIN - READY
    timer.fire_last()
    assert hold.take(cancelled.message.occurrence_id) is cancelled
    clock.now = DUE.timestamp()
    timer.fire_last()
    assert [d for d, _ in seen.groups[0]] == [kept]
    assert hold.get(kept.message.occurrence_id) is None  # out of the hold once released


def test_a_young_generation_half_full_is_collected_after_a_group_not_later() -> None:
    before = gc.get_threshold()
    gc.set_threshold(10_000, 10, 10)
    try:
        gc.collect()
        kept = [[n] for n in range(1_000)]  # tracked objects: well under half
        collect_young_if_half_full()
        assert gc.get_count()[0] >= 1_000  # left alone
        kept += [[n] for n in range(6_000)]  # now over half
        collect_young_if_half_full()
        assert gc.get_count()[0] < 1_000
    finally:
        gc.set_threshold(*before)
    assert len(kept) == 7_000


def test_a_group_whose_readying_fails_is_still_released(caplog: Any) -> None:
    """``ready`` raising (a bug) leaves the group unreadied, not stuck: at the instant it is
    released with no tokens, so each delivery takes the one-by-one path."""
    clock, timer = Clock(DUE - timedelta(seconds=1)), FakeTimer()
    seen = Readied()

    def broken(deliveries: list[Any]) -> list[object]:
        raise RuntimeError("bug")

    hold = Hold(
        release=lambda _: None,
        drop=lambda _: None,
        ready=broken,
        release_group=seen.release_group,
        wall=clock,
        timer=timer,
    )
    deliveries = hold_new(hold, 2)
    clock.now = DUE.timestamp() - SPIN - READY
    timer.fire_last()
    assert "readying held deliveries failed" in caplog.text
    clock.now = DUE.timestamp()
    timer.fire_last()
    assert seen.groups == [[(d, None) for d in deliveries]]
