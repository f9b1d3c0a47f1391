"""The in-process broker (embedded mode): asyncio queues in this process, no I/O.

Semantics follow the RabbitMQ topology of DESIGN.md §5 so that services and workers behave the
same on both:

* **Each message goes to one group**: the queue of the worker group its ``worker_id`` names
  (the dispatcher's choice), made if it does not exist yet; never a copy to another group.
* **One queue per group, shared by its consumers.** Within a queue, higher priority first, then
  publication order. A message given back (``reject(requeue=True)``, or still unsettled when
  the broker closes) returns to its original place, flagged ``redelivered``.
* **Prefetch.** A consumer holds at most ``prefetch`` unsettled deliveries; the next one is
  handed out only after one of them is settled. Stopping a consumer (``aclose()``) stops intake;
  its unsettled deliveries stay its to settle until :meth:`InProcessBroker.close` hands back
  those still open. A settle after that is a no-op (the message comes again: at least once).
* **Dead letters.** ``reject(requeue=False)`` moves a message to the dead-letter channel (the
  newest ``dead_letter_limit`` waiting are kept), consumed in batches by
  :meth:`InProcessBroker.consume_dead_letters` like the status channel; :attr:`dead_letters`
  shows the job messages waiting there.
* **Status and log channels** keep records in publication order and hand them out in
  :class:`~rota.core.records.Batch` objects. A batch not acknowledged when its consumer stops
  (``aclose()`` or broker close) is put back at the front for the next consumer.

Nothing survives the process: after a restart the store re-dispatches (``reset_dispatch``).
The hot path creates no task per message: consumers wait on one future each only when they
have nothing to do.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from rota.core.errors import BackendUnavailableError, ConflictError, RotaError
from rota.core.models import JobMessage, LogRecord, Priority, StatusRecord
from rota.core.ports import Broker, Delivery
from rota.core.records import Batch, ReceivedDeadLetter, batch_due
from rota.core.wire import DeadLetter, decode_dead_letter, encode_job_message

T = TypeVar("T")

_LEVELS = len(Priority)
_TOP = _LEVELS - 1
_YIELD_EVERY = 64
"""A consumer that finds messages ready yields to the event loop once per this many
deliveries, so a busy consumer cannot starve the rest of the process."""

_Item = tuple[int, JobMessage]
"""``(publication sequence, message)``."""


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


class _GroupQueue:
    """One worker group's job queue: per priority level, the messages never delivered (a deque
    in publication order) and those given back (a heap by publication sequence). Given-back
    messages are always older than every never-delivered one of their level, so taking from
    the heap first keeps publication order exactly."""

    __slots__ = ("fresh", "name", "returned", "size", "waiters", "worker_id")

    def __init__(self, name: str, worker_id: str) -> None:
        self.name = name
        self.worker_id = worker_id
        self.fresh: list[deque[_Item]] = [deque() for _ in range(_LEVELS)]
        self.returned: list[list[_Item]] = [[] for _ in range(_LEVELS)]
        self.size = 0
        self.waiters: list[asyncio.Future[None]] = []

    def put(self, level: int, item: _Item) -> None:
        self.fresh[level].append(item)
        self.size += 1

    def put_back(self, level: int, item: _Item) -> None:
        heapq.heappush(self.returned[level], item)
        self.size += 1

    def take(self) -> tuple[int, _Item, bool] | None:
        """``(level, item, redelivered)`` of the next message, or ``None`` if empty."""
        if not self.size:
            return None
        for level in range(_TOP, -1, -1):
            returned = self.returned[level]
            if returned:
                self.size -= 1
                return level, heapq.heappop(returned), True
            fresh = self.fresh[level]
            if fresh:
                self.size -= 1
                return level, fresh.popleft(), False
        return None  # pragma: no cover - size says otherwise

    def wake_all(self) -> None:
        waiters, self.waiters = self.waiters, []
        for waiter in waiters:
            _wake(waiter)


class _InProcessDelivery(Delivery):
    __slots__ = ("_consumer", "_item", "_level", "_settled", "message", "redelivered")

    def __init__(self, consumer: _JobConsumer, level: int, item: _Item, redelivered: bool) -> None:
        self.message = item[1]
        self.redelivered = redelivered
        self._consumer = consumer
        self._level = level
        self._item = item
        self._settled = False

    async def ack(self) -> None:
        self._settle()

    async def reject(self, *, requeue: bool) -> None:
        if self._settle():
            consumer = self._consumer
            if requeue:
                consumer.group.put_back(self._level, self._item)
                consumer.group.wake_all()
            else:
                consumer.broker._dead_letter(self.message, consumer.group.name)

    def _settle(self) -> bool:
        """Mark settled; ``False`` if it was already handed back by a close."""
        if self._settled:
            raise ConflictError("delivery already settled")
        self._settled = True
        return self._consumer.settled(self)

    def hand_back(self) -> None:
        """Return the message to its queue (the consumer already forgot it: a later settle
        is a no-op)."""
        self._consumer.group.put_back(self._level, self._item)


class _JobConsumer:
    """One consumer of a group's queue; its own async iterator of deliveries."""

    def __init__(self, broker: InProcessBroker, group: _GroupQueue, prefetch: int) -> None:
        if prefetch < 1:
            raise ValueError("prefetch must be at least 1")
        self.broker = broker
        self.group = group
        self.prefetch = prefetch
        self.unsettled: set[_InProcessDelivery] = set()
        self.closed = False
        self._waiter: asyncio.Future[None] | None = None
        self._streak = 0

    def __aiter__(self) -> _JobConsumer:
        return self

    async def __anext__(self) -> Delivery:
        while not self.closed:
            if len(self.unsettled) < self.prefetch:
                taken = self.group.take()
                if taken is not None:
                    delivery = _InProcessDelivery(self, *taken)
                    self.unsettled.add(delivery)
                    await self._pace()
                    return delivery
            await self._wait(for_message=len(self.unsettled) < self.prefetch)
        raise StopAsyncIteration

    async def _pace(self) -> None:
        self._streak += 1
        if self._streak >= _YIELD_EVERY:
            self._streak = 0
            await asyncio.sleep(0)

    async def _wait(self, *, for_message: bool) -> None:
        self._streak = 0
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        waiters = self.group.waiters
        if for_message:
            waiters.append(waiter)
        try:
            await waiter
        finally:
            self._waiter = None
            if for_message and waiter in waiters:  # woken by a settle or a close
                waiters.remove(waiter)

    def settled(self, delivery: _InProcessDelivery) -> bool:
        """Forget a settled delivery; ``False`` if it was already handed back."""
        try:
            self.unsettled.remove(delivery)
        except KeyError:
            return False
        if self.closed and not self.unsettled:
            self.broker._consumers.discard(self)
        _wake(self._waiter)
        return True

    async def aclose(self) -> None:
        """Stop intake; unsettled deliveries can still be settled."""
        self.stop()
        if not self.unsettled:
            self.broker._consumers.discard(self)

    def stop(self) -> None:
        self.closed = True
        _wake(self._waiter)

    def hand_back(self) -> None:
        deliveries, self.unsettled = self.unsettled, set()
        for delivery in deliveries:
            delivery.hand_back()
        if deliveries:
            self.group.wake_all()


_Chunk = tuple[tuple[int, int], float, list[T]]
"""``((publication sequence, offset), arrival time on the loop clock, records)``."""


class _RecordChannel(Generic[T]):
    """The status or log queue: chunks of records (one per publish, split when a batch takes
    part of one) kept in publication order, also when taken chunks are put back."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.chunks: deque[_Chunk[T]] = deque()
        self.count = 0
        self.waiters: list[asyncio.Future[None]] = []
        self._seq = itertools.count()

    def publish(self, records: Sequence[T]) -> None:
        if records:
            now = asyncio.get_running_loop().time()
            self.chunks.append(((next(self._seq), 0), now, list(records)))
            self.count += len(records)
            self._wake_all()

    def take(self, max_items: int) -> list[_Chunk[T]]:
        """Chunks holding up to ``max_items`` records from the front (the last one split)."""
        taken: list[_Chunk[T]] = []
        chunks = self.chunks
        room = max_items
        while chunks and room:
            key, arrived, records = chunks[0]
            if len(records) <= room:
                taken.append(chunks.popleft())
                room -= len(records)
            else:
                taken.append((key, arrived, records[:room]))
                chunks[0] = ((key[0], key[1] + room), arrived, records[room:])
                room = 0
        self.count -= max_items - room
        return taken

    def put_back(self, taken: list[_Chunk[T]]) -> None:
        """Return taken chunks to their places (they are older than nearly everything left,
        so each insertion scans only the first few chunks)."""
        chunks = self.chunks
        for chunk in sorted(taken, key=lambda c: c[0], reverse=True):
            pos = 0
            while pos < len(chunks) and chunks[pos][0] < chunk[0]:
                pos += 1
            chunks.insert(pos, chunk)
            self.count += len(chunk[2])
        if taken:
            self._wake_all()

    def messages(self) -> int:
        """Published messages with records waiting (a split message counts once)."""
        return len({chunk[0][0] for chunk in self.chunks})

    def _wake_all(self) -> None:
        waiters, self.waiters = self.waiters, []
        for waiter in waiters:
            _wake(waiter)


class _BatchConsumer(Generic[T]):
    """An async iterator of batches from a record channel; unacked batches go back on close."""

    def __init__(
        self, broker: InProcessBroker, channel: _RecordChannel[T], max_items: int, max_wait: float
    ) -> None:
        if max_items < 1:
            raise ValueError("max_items must be at least 1")
        self.broker = broker
        self.channel = channel
        self.max_items = max_items
        self.max_wait = max_wait
        self.closed = False
        self.pending: dict[int, list[_Chunk[T]]] = {}
        self._keys = itertools.count()
        self._waiter: asyncio.Future[None] | None = None
        self._served = False
        """A batch was handed out: records waiting from before the next ask are a backlog."""

    def __aiter__(self) -> _BatchConsumer[T]:
        return self

    async def __anext__(self) -> Batch[T]:
        channel = self.channel
        loop = asyncio.get_running_loop()
        asked = loop.time()
        while not self.closed:
            if channel.count >= self.max_items:
                return self._batch()
            if channel.count:
                deadline = batch_due(
                    channel.chunks[0][1], asked, served=self._served, max_wait=self.max_wait
                )
                if loop.time() >= deadline:
                    return self._batch()
                await self._wait(deadline)
            else:
                await self._wait(None)
        raise StopAsyncIteration

    def _batch(self) -> Batch[T]:
        self._served = True
        taken = self.channel.take(self.max_items)
        key = next(self._keys)
        self.pending[key] = taken
        items = taken[0][2] if len(taken) == 1 else [r for chunk in taken for r in chunk[2]]
        return Batch(items, lambda: self.pending.pop(key, None))

    async def _wait(self, deadline: float | None) -> None:
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        waiters = self.channel.waiters
        waiters.append(waiter)
        timer = None if deadline is None else loop.call_at(deadline, _wake, waiter)
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()
            if waiter in waiters:
                waiters.remove(waiter)

    async def aclose(self) -> None:
        """Stop; batches not acknowledged go back to their places in the channel."""
        self.stop()
        self.broker._batch_consumers.discard(self)

    def stop(self) -> None:
        if self.closed:
            return
        self.closed = True
        pending, self.pending = self.pending, {}
        self.channel.put_back([chunk for taken in pending.values() for chunk in taken])
        _wake(self._waiter)


class InProcessBroker(Broker):
    """:class:`~rota.core.ports.Broker` inside this process (embedded mode); see the module
    docstring for its routing, prefetch and redelivery semantics."""

    def __init__(self, *, prefix: str = "rota", dead_letter_limit: int = 10_000) -> None:
        self._prefix = prefix
        self._groups: dict[str, _GroupQueue] = {}
        self._seq = itertools.count()
        self._consumers: set[_JobConsumer] = set()
        self._batch_consumers: set[_BatchConsumer[Any]] = set()
        self._status: _RecordChannel[StatusRecord] = _RecordChannel(f"{prefix}.status")
        self._logs: _RecordChannel[LogRecord] = _RecordChannel(f"{prefix}.logs")
        self._dead: _RecordChannel[ReceivedDeadLetter] = _RecordChannel(f"{prefix}.dlq")
        self._dead_limit = dead_letter_limit
        self._closed = False

    @property
    def dead_letters(self) -> list[JobMessage]:
        """The job messages waiting in the dead-letter channel (not taken by a consumer),
        oldest first (a copy)."""
        return [
            item.letter.message
            for _key, _arrived, items in self._dead.chunks
            for item in items
            if item.letter is not None
        ]

    async def start(self) -> None:
        self._closed = False

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        consumers, self._consumers = self._consumers, set()
        for consumer in consumers:
            consumer.stop()
            consumer.hand_back()
        batch_consumers, self._batch_consumers = self._batch_consumers, set()
        for batch_consumer in batch_consumers:
            batch_consumer.stop()

    async def declare_worker_group(self, worker_id: str, job_types: Sequence[str]) -> None:
        self._group(worker_id)  # the types route nothing: the dispatcher names the group

    async def publish_jobs(
        self, messages: Sequence[JobMessage], *, envelopes: Mapping[str, int] | None = None
    ) -> None:
        self._check_open()
        for message in messages:
            if not message.worker_id:
                raise ValueError(
                    f"job message {message.occurrence_id} names no worker group to send it to"
                )
        seq = self._seq
        touched: set[_GroupQueue] = set()
        group: _GroupQueue | None = None
        for message in messages:
            if group is None or group.worker_id != message.worker_id:
                group = self._group(message.worker_id or "")
            group.put(min(max(int(message.priority), 0), _TOP), (next(seq), message))
            touched.add(group)
        for group in touched:
            group.wake_all()

    def consume_jobs(
        self, worker_id: str, prefetch: int, *, envelopes: Callable[[], bool] | None = None
    ) -> _JobConsumer:
        del envelopes  # every job is handed over alone
        self._check_open()
        consumer = _JobConsumer(self, self._group(worker_id), prefetch)
        self._consumers.add(consumer)
        return consumer

    async def publish_status(self, records: Sequence[StatusRecord]) -> None:
        self._check_open()
        self._status.publish(records)

    async def publish_logs(self, records: Sequence[LogRecord]) -> None:
        self._check_open()
        self._logs.publish(records)

    def consume_status(self, max_items: int, max_wait: float) -> _BatchConsumer[StatusRecord]:
        self._check_open()
        consumer = _BatchConsumer(self, self._status, max_items, max_wait)
        self._batch_consumers.add(consumer)
        return consumer

    def consume_logs(self, max_items: int, max_wait: float) -> _BatchConsumer[LogRecord]:
        self._check_open()
        consumer = _BatchConsumer(self, self._logs, max_items, max_wait)
        self._batch_consumers.add(consumer)
        return consumer

    async def queue_depths(self, groups: Sequence[str] = ()) -> dict[str, int]:
        # Every group's queue lives here: ``groups`` adds nothing that exists.
        depths = {group.name: group.size for group in self._groups.values()}
        depths[self._status.name] = self._status.messages()
        depths[self._logs.name] = self._logs.messages()
        depths[self._dead.name] = self._dead.messages()
        return depths

    def _group(self, worker_id: str) -> _GroupQueue:
        group = self._groups.get(worker_id)
        if group is None:
            group = self._groups[worker_id] = _GroupQueue(
                f"{self._prefix}.jobs.{worker_id}", worker_id
            )
        return group

    # --- dead letters ----------------------------------------------------------------------

    def consume_dead_letters(
        self, max_items: int, max_wait: float
    ) -> _BatchConsumer[ReceivedDeadLetter]:
        self._check_open()
        consumer = _BatchConsumer(self, self._dead, max_items, max_wait)
        self._batch_consumers.add(consumer)
        return consumer

    async def dead_letter_body(self, body: bytes, *, reason: str = "rejected") -> None:
        """Put a message body in the dead-letter channel as a consumer that could not read it
        would (messages in this process are records, never unreadable bytes: this is for
        tools and tests that need a poison message in the embedded mode)."""
        self._check_open()
        try:
            letter: DeadLetter | None = decode_dead_letter(body)
            error = None
        except RotaError as exc:
            letter, error = None, exc.message
        self._put_dead(
            ReceivedDeadLetter(body=bytes(body), letter=letter, error=error, reason=reason)
        )

    def _dead_letter(self, message: JobMessage, queue: str) -> None:
        try:
            body = encode_job_message(message)
        except RotaError:  # data that cannot travel as JSON: the record still can
            body = b""
        letter = DeadLetter(message=message)
        self._put_dead(ReceivedDeadLetter(body=body, letter=letter, reason="rejected", queue=queue))

    def _put_dead(self, item: ReceivedDeadLetter) -> None:
        """Append a dead letter; beyond the limit the oldest waiting ones are dropped."""
        channel = self._dead
        channel.publish([item])
        while channel.count > self._dead_limit and channel.chunks:
            _key, _arrived, dropped = channel.chunks.popleft()
            channel.count -= len(dropped)

    def _check_open(self) -> None:
        if self._closed:
            raise BackendUnavailableError("the in-process broker is closed")
