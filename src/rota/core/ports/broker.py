"""The broker port: job messages to workers, status and log records back."""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Callable, Mapping, Sequence

from rota.core.models import (
    JobMessage,
    LogRecord,
    StatusRecord,
)
from rota.core.records import (
    Batch,
    ReceivedDeadLetter,
)


class Delivery(abc.ABC):
    """A job message handed to a consumer. Exactly one of ``ack``/``reject`` settles it."""

    message: JobMessage
    redelivered: bool

    @property
    def is_live(self) -> bool:
        """Whether settling it still reaches the broker: ``False`` once the channel it came on
        is gone (the broker then delivers it again, here or to another consumer)."""
        return True

    @abc.abstractmethod
    async def ack(self) -> None:
        """The message is done with; it will not be delivered again."""

    @abc.abstractmethod
    async def reject(self, *, requeue: bool) -> None:
        """Give the message back (``requeue=True``: delivered again, to this consumer or
        another) or drop it (``requeue=False``: it goes to the dead-letter queue)."""


class Broker(abc.ABC):
    """Moves job messages to workers and status/log records back (DESIGN.md §5).

    Each job message goes to the queue of the one worker group its ``worker_id`` names (the
    dispatcher chooses it; never a copy to another group); within a queue, higher priority
    first, then publication order. Publishing returns once the
    broker has taken responsibility for the messages (confirms awaited) and raises
    ``BackendUnavailableError`` when it cannot within its timeout.
    """

    @abc.abstractmethod
    async def start(self) -> None:
        """Connect and declare the shared topology (idempotent)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Stop consumers and disconnect (idempotent); unacknowledged deliveries go back."""

    @abc.abstractmethod
    async def declare_worker_group(self, worker_id: str, job_types: Sequence[str]) -> None:
        """Make sure the group's job queue exists. Messages sent to it are kept until
        consumed, even when no consumer is attached. (``job_types``: what the group runs;
        routing does not depend on it: the dispatcher names the group of each message.)"""

    @abc.abstractmethod
    async def publish_jobs(
        self, messages: Sequence[JobMessage], *, envelopes: Mapping[str, int] | None = None
    ) -> None:
        """Publish job messages (persistent, with their priority), each to the queue of the
        group its ``worker_id`` names (the queue is made if it does not exist). A message
        naming no group is a ``ValueError``. ``envelopes``: the groups whose every consumer
        reads envelopes, and the most jobs each takes in one (what their workers announced,
        :meth:`envelope_size`); a broker may carry their jobs of one priority together, each
        still delivered as a :class:`Delivery` of its own."""

    def message_counts(self) -> Mapping[str, int]:
        """Job messages (single or envelope) published and delivered by this process, and the
        jobs they carried: ``published_messages``, ``published_jobs``,
        ``delivered_messages``, ``delivered_jobs`` (empty: this broker moves no messages)."""
        return {}

    def envelope_size(self, prefetch: int) -> int:
        """The most jobs a consumer of ``prefetch`` takes in one envelope, which its worker
        announces (``0``: this broker carries every job alone)."""
        del prefetch
        return 0

    @abc.abstractmethod
    def consume_jobs(
        self, worker_id: str, prefetch: int, *, envelopes: Callable[[], bool] | None = None
    ) -> AsyncIterator[Delivery]:
        """Deliveries from the group's queue, at most ``prefetch`` unsettled at a time (about
        that many with envelopes). Several consumers of one group share its queue (each
        message goes to one of them). ``envelopes``: whether the group gets envelopes now
        (every live instance announced them), read as messages come; ``None``: treat every
        message as if it came alone."""

    @abc.abstractmethod
    async def publish_status(self, records: Sequence[StatusRecord]) -> None:
        """Publish status records as one message (order kept)."""

    @abc.abstractmethod
    async def publish_logs(self, records: Sequence[LogRecord]) -> None:
        """Publish log records as one message (order kept)."""

    @abc.abstractmethod
    def consume_status(self, max_items: int, max_wait: float) -> AsyncIterator[Batch[StatusRecord]]:
        """Batches of status records in publication order: a batch is yielded once it holds
        ``max_items`` records or ``max_wait`` seconds passed since its first record, and at
        once when its first record came while the previous batch was out (a backlog: the
        records gathered while the consumer wrote it are not held back any longer)."""

    @abc.abstractmethod
    def consume_logs(self, max_items: int, max_wait: float) -> AsyncIterator[Batch[LogRecord]]:
        """As :meth:`consume_status`, for log records."""

    @abc.abstractmethod
    def consume_dead_letters(
        self, max_items: int, max_wait: float
    ) -> AsyncIterator[Batch[ReceivedDeadLetter]]:
        """Batches of the messages in the dead-letter queue (job messages rejected without
        requeue, or published there with a reason), oldest first, batched as
        :meth:`consume_status`. Every message is yielded, also one whose body cannot be
        decoded (``letter`` is ``None``, ``error`` says why, ``body`` holds it as received).
        A message leaves the queue once its batch is acknowledged."""

    @abc.abstractmethod
    async def queue_depths(self, groups: Sequence[str] = ()) -> dict[str, int]:
        """Messages waiting, by queue name: the status, log and dead-letter queues, the job
        queues of the worker groups this broker declared or consumed, and those of
        ``groups`` (a group whose queue does not exist is left out)."""
