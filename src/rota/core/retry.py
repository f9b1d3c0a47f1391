"""The retry-delay policy, pure: when the next attempt of a failed occurrence is due.

Retry ``n`` (1 for the first, i.e. after attempt ``n`` failed) waits ``base × 2^(n − 1)``
seconds: ``base`` is the job's ``retryDelaySeconds`` when set, else the job type's
``retry_delay``, else :data:`DEFAULT_RETRY_DELAY`. With a jitter fraction ``j`` the wait is
drawn uniformly from ``[d × (1 − j), d × (1 + j)]``; it is never longer than the job type's
``max_retry_delay`` (else :data:`MAX_RETRY_DELAY`) nor shorter than 0. The worker's executor
applies it when a handler fails (a job type's ``should_retry`` hook may decide instead).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime, timedelta

DEFAULT_RETRY_DELAY = 10.0
"""Seconds before the first retry when neither the job nor its job type names a delay."""
MAX_RETRY_DELAY = 30 * 24 * 3600.0
"""The longest wait before a retry when the job type names no ``max_retry_delay``."""
_MAX_DOUBLINGS = 64
"""``2^(n − 1)`` stops growing here (the cap applies long before; this keeps it a float)."""


def retry_delay(
    retry: int,
    *,
    job_delay: float | None = None,
    type_delay: float | None = None,
    jitter: float | None = None,
    max_delay: float | None = None,
    draw: Callable[[], float] = random.random,
) -> float:
    """Seconds before retry ``retry`` (1 for the first). ``job_delay``: the job's
    ``retryDelaySeconds``; ``type_delay``, ``jitter``, ``max_delay``: the job type's
    ``retry_delay``, ``retry_jitter`` and ``max_retry_delay`` (``None``: not set). ``draw``
    returns a number in ``[0, 1)``; it is called once, and only when there is a jitter."""
    base = job_delay
    if base is None:
        base = type_delay
    if base is None:
        base = DEFAULT_RETRY_DELAY
    delay = base * 2.0 ** min(retry - 1, _MAX_DOUBLINGS)
    if jitter:
        delay *= 1.0 + jitter * (2.0 * draw() - 1.0)
    cap = MAX_RETRY_DELAY if max_delay is None else max_delay
    return max(0.0, min(delay, cap))


def retry_at(
    now: datetime,
    *,
    retry_count: int,
    max_retries: int,
    job_delay: float | None = None,
    type_delay: float | None = None,
    jitter: float | None = None,
    max_delay: float | None = None,
    draw: Callable[[], float] = random.random,
) -> datetime | None:
    """When the next attempt is due after attempt ``retry_count + 1`` failed at ``now``
    (``None``: no retries left, ``retry_count >= max_retries``); the delay is
    :func:`retry_delay` of retry ``retry_count + 1``."""
    if retry_count >= max_retries:
        return None
    delay = retry_delay(
        retry_count + 1,
        job_delay=job_delay,
        type_delay=type_delay,
        jitter=jitter,
        max_delay=max_delay,
        draw=draw,
    )
    return now + timedelta(seconds=delay)
