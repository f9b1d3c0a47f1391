"""The retry-delay policy (rota.core.retry), without a worker."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from rota.core.retry import DEFAULT_RETRY_DELAY, MAX_RETRY_DELAY, retry_at, retry_delay

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(("retry", "seconds"), [(1, 3.0), (2, 6.0), (3, 12.0), (5, 48.0)])
def test_retry_n_waits_base_times_two_to_the_n_minus_one(retry: int, seconds: float) -> None:
    assert retry_delay(retry, type_delay=3.0) == seconds


def test_the_jobs_delay_wins_over_the_job_types_and_the_default_is_ten_seconds() -> None:
    assert retry_delay(1, job_delay=2.0, type_delay=3.0) == 2.0
    assert retry_delay(1, job_delay=0.0, type_delay=3.0) == 0.0  # 0 is set, not missing
    assert retry_delay(1) == DEFAULT_RETRY_DELAY == 10.0


def test_the_delay_is_capped_by_the_job_type_or_the_global_maximum() -> None:
    assert retry_delay(3, type_delay=3.0, max_delay=20.0) == 12.0
    assert retry_delay(4, type_delay=3.0, max_delay=20.0) == 20.0  # 24 s, capped
    assert retry_delay(501, type_delay=3.0, max_delay=20.0) == 20.0
    assert retry_delay(501, type_delay=3.0) == MAX_RETRY_DELAY
    assert retry_delay(71, job_delay=1e300) == MAX_RETRY_DELAY  # no overflow


@pytest.mark.parametrize(("draw", "seconds"), [(0.0, 6.0), (0.5, 12.0), (0.75, 15.0)])
def test_jitter_moves_the_delay_by_its_fraction(draw: float, seconds: float) -> None:
    delay = retry_delay(3, type_delay=3.0, jitter=0.5, draw=lambda: draw)
    assert delay == pytest.approx(seconds)  # 12 s ± 50 %


def test_jitter_is_cut_to_the_cap_and_never_negative() -> None:
    assert retry_delay(1, type_delay=4.0, jitter=0.5, max_delay=5.0, draw=lambda: 0.99) == 5.0
    assert retry_delay(1, type_delay=4.0, jitter=2.0, draw=lambda: 0.0) == 0.0


def test_no_jitter_draws_nothing() -> None:
    def draw() -> float:
        raise AssertionError("drew a number without a jitter")

    assert retry_delay(2, type_delay=1.0, jitter=0.0, draw=draw) == 2.0
    assert retry_delay(2, type_delay=1.0, jitter=None, draw=draw) == 2.0


def test_retry_at_is_now_plus_the_delay_of_the_next_retry() -> None:
    # attempt 3 failed (retry count 2): retry 3 waits 3 s x 2^2
    due = retry_at(NOW, retry_count=2, max_retries=5, type_delay=3.0)
    assert due == NOW + timedelta(seconds=12)


def test_retry_at_is_none_once_the_retries_are_used_up() -> None:
    assert retry_at(NOW, retry_count=3, max_retries=3, type_delay=3.0) is None
    assert retry_at(NOW, retry_count=0, max_retries=0) is None
    assert retry_at(NOW, retry_count=0, max_retries=1) == NOW + timedelta(seconds=10)
