"""The executor's settings record: what it refuses and the prefetch it gives."""

from __future__ import annotations

import dataclasses

import pytest

from rota.worker.config import HAND_BACK_AFTER, ExecutorConfig


def _config(**fields: object) -> ExecutorConfig:
    values: dict[str, object] = {
        "worker_id": "w",
        "instance_id": "w-1",
        "concurrency": 4,
        "sync_threads": 2,
        "flush_interval": 0.02,
        **fields,
    }
    return ExecutorConfig(**values)  # type: ignore[arg-type]


def test_defaults_and_frozen() -> None:
    config = _config()
    assert (config.hand_back_after, config.hold_capacity, config.default_timeout) == (
        HAND_BACK_AFTER,
        0,
        None,
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.concurrency = 8  # type: ignore[misc]


def test_settings_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        ExecutorConfig("w", "w-1", 4, 2, 0.02)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"sync_threads": 0}, "sync_threads"),
        ({"default_timeout": 0.0}, "default_timeout"),
        ({"hold_capacity": -1}, "hold_capacity"),
    ],
)
def test_a_bad_setting_is_refused_by_name(fields: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        _config(**fields)


def test_the_prefetch_is_the_slots_the_hold_and_the_limits_room() -> None:
    config = _config(concurrency=4, hold_capacity=10)
    assert config.prefetch(limited=False) == 14
    assert config.prefetch(limited=True) == 18  # the limits' room: concurrency by default
    assert _config(concurrency=4, limit_capacity=2).prefetch(limited=True) == 6
