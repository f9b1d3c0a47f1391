"""The job consumer's direct intake (``rota.brokers.rabbitmq.jobs._direct_intake``): a delivery
for the consumer's callback is read with aiormq's own frame readers and handed to the consumer
at once, without a task per delivery; anything else goes as aiormq would send it."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from rota.brokers.rabbitmq.jobs import _direct_intake


class _Deliver:
    def __init__(self, tag: str | None) -> None:
        self.consumer_tag = tag


class _Channel:
    """The parts of an aiormq channel the direct intake uses; records what it was asked."""

    def __init__(self) -> None:
        self.consumers: dict[str, Any] = {}
        self.read: list[str] = []
        self.tasks: list[asyncio.Task[None]] = []

    async def _Channel__get_content_header(self) -> str:  # aiormq's name-mangled reader
        self.read.append("header")
        return "header"

    async def _read_content(self, frame: _Deliver, header: str) -> tuple[str | None, str]:
        self.read.append("body")
        return (frame.consumer_tag, header)

    async def _on_deliver_frame(self, frame: _Deliver) -> None:
        raise AssertionError("aiormq's own path is replaced")

    def create_task(self, coro: Any) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)
        self.tasks.append(task)
        return task


async def test_a_delivery_for_the_consumer_is_taken_without_a_task() -> None:
    channel = _Channel()
    taken: list[object] = []

    async def callback(message: object) -> None:
        raise AssertionError("the callback is not called: the message is taken directly")

    assert _direct_intake(channel, callback, taken.append)  # type: ignore[arg-type]
    channel.consumers["ours"] = callback
    await channel._on_deliver_frame(_Deliver("ours"))
    assert taken == [("ours", "header")]
    assert channel.read == ["header", "body"]
    assert channel.tasks == []


async def test_other_consumers_get_their_task_and_unknown_ones_are_dropped() -> None:
    channel = _Channel()
    taken: list[object] = []
    called: list[object] = []

    async def ours(message: object) -> None:
        raise AssertionError("not this one's")

    async def theirs(message: object) -> None:
        called.append(message)

    assert _direct_intake(channel, ours, taken.append)  # type: ignore[arg-type]
    channel.consumers.update(ours=ours, theirs=theirs)
    await channel._on_deliver_frame(_Deliver("theirs"))
    await channel._on_deliver_frame(_Deliver("cancelled"))
    await asyncio.gather(*channel.tasks)
    assert called == [("theirs", "header")]
    assert taken == []
    assert channel.read == ["header", "body"] * 2  # every delivery's frames are read


async def test_a_failure_to_take_is_logged_and_never_breaks_the_reader(
    caplog: pytest.LogCaptureFixture,
) -> None:
    channel = _Channel()

    async def callback(message: object) -> None:
        pass

    def take(message: object) -> None:
        raise RuntimeError("boom")

    assert _direct_intake(channel, callback, take)  # type: ignore[arg-type]
    channel.consumers["ours"] = callback
    with caplog.at_level(logging.ERROR):
        await channel._on_deliver_frame(_Deliver("ours"))
    assert "taking a job delivery failed" in caplog.text


def test_an_aiormq_without_the_readers_keeps_its_own_path() -> None:
    class Bare:
        def __init__(self) -> None:
            self.consumers: dict[str, Any] = {}

        async def _on_deliver_frame(self, frame: object) -> None:
            pass

    channel = Bare()
    own = channel._on_deliver_frame

    async def callback(message: object) -> None:
        pass

    assert not _direct_intake(channel, callback, lambda message: None)  # type: ignore[arg-type]
    assert channel._on_deliver_frame == own
