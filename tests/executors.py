"""Building an :class:`~rota.worker.executor.Executor` in a test from keyword arguments."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from rota.core.ports import Broker
from rota.sdk.registry import JobRegistry
from rota.worker.config import ExecutorConfig
from rota.worker.executor import Executor

_SETTINGS = frozenset(field.name for field in fields(ExecutorConfig))


def make_executor(broker: Broker, registry: JobRegistry, **kwargs: Any) -> Executor:
    """An executor whose :class:`ExecutorConfig` holds the keyword arguments that name its
    fields (``worker_id``, ``concurrency``, ``hand_back_after``, …); the others (``clock``,
    ``store``, ``claims``, ``limits``, ``rng``, …) are the executor's collaborators."""
    config = ExecutorConfig(**{k: v for k, v in kwargs.items() if k in _SETTINGS})
    parts = {k: v for k, v in kwargs.items() if k not in _SETTINGS}
    return Executor(broker, registry, config, **parts)
