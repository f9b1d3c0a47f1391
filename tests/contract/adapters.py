"""The one way a contract suite runs on every adapter of its port.

A suite names its adapters and how to make each, and binds the two fixtures it gets back::

    adapter, harness = parametrize_adapters({"memory": _memory, "redis": _redis})

Every test that takes ``harness`` (or ``adapter``, the adapter's name) runs once per adapter,
with the name as the test id (``test_x[memory]``, ``test_x[redis]``; ``make test-fast``
deselects the service ones by that name). The names bound must be ``adapter`` and the fixture's
own: pytest names a fixture by the module attribute that holds it, and the second fixture asks
for ``adapter``. A factory gets an exit stack and the test's request: it pushes its clean-ups on
the stack (they run in reverse order when the test ends, so a close pushed last runs first) and
may ask the request for session fixtures (``request.getfixturevalue("rabbitmq_url")``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from typing import Any, TypeVar

import pytest

T = TypeVar("T")

AdapterFactory = Callable[[AsyncExitStack, pytest.FixtureRequest], Awaitable[T]]
"""Makes one adapter (or a harness around it) for one test, its clean-ups on the stack."""


def parametrize_adapters(factories: Mapping[str, AdapterFactory[T]]) -> tuple[Any, Any]:
    """Two fixtures: ``adapter``, parametrized over the names of ``factories``, and the
    adapter its factory made for the test, cleaned up when the test ends."""

    @pytest.fixture(params=list(factories))
    def adapter(request: pytest.FixtureRequest) -> str:
        return str(request.param)

    @pytest.fixture
    async def made(adapter: str, request: pytest.FixtureRequest) -> AsyncIterator[T]:
        async with AsyncExitStack() as stack:
            yield await factories[adapter](stack, request)

    return adapter, made
