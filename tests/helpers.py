"""Helpers shared by the test tiers (importable by name, unlike ``conftest.py``): one
poll-with-deadline wait (:func:`eventually`) and the settings a
test runtime starts from (:func:`settings_for`). The fixtures that use them live in
``tests/conftest.py``."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rota.app.settings import Settings

if TYPE_CHECKING:
    from rota.app.runtime import Runtime
    from rota.observability.tracing import Tracing

POLL = 0.02
"""Seconds between two looks at the state a test waits for."""


async def eventually(
    check: Callable[[], Awaitable[object]] | Callable[[], object],
    within: float,
    what: str,
    *,
    every: float = POLL,
) -> float:
    """Poll ``check`` (sync or async) until it returns something truthy; returns the seconds
    that took. Fails with "timed out waiting for ``what``" after ``within`` seconds.

    ``within`` bounds a wait for progress, not a speed target: generous, because CI runs the
    suites on two loaded cores. A test that times a reaction asserts on the returned seconds."""
    start = time.monotonic()
    while time.monotonic() < start + within:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return time.monotonic() - start
        await asyncio.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def settings_for(
    tmp_path: Path, overrides: Mapping[str, Any] | None = None, **fields: Any
) -> Settings:
    """The settings of an embedded test runtime: environment ``test``, its data in
    ``tmp_path``, no Redis and no RabbitMQ (``fields`` may say otherwise, e.g. a
    ``database_url``). ``overrides`` set nested values by dotted path after construction,
    e.g. ``{"scheduler.sweeper_interval_seconds": 0.5}``."""
    settings = Settings(
        **(
            {"environment": "test", "data_dir": tmp_path, "redis_url": None, "amqp_url": None}
            | fields
        )
    )
    for path, value in (overrides or {}).items():
        *parents, name = path.split(".")
        target: Any = settings
        for parent in parents:
            target = getattr(target, parent)
        if not hasattr(target, name):
            raise AttributeError(f"no setting {path!r}")
        setattr(target, name, value)
    return settings


class RuntimeFactory(Protocol):
    """The ``runtime_factory`` fixture (``tests/conftest.py``)."""

    async def __call__(
        self,
        settings_overrides: Mapping[str, Any] | None = None,
        job_modules: Sequence[str] = (),
        *,
        tracing: Tracing | None = None,
        grace: float = 2.0,
    ) -> Runtime: ...
