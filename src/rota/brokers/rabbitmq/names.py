"""Every AMQP name and argument of Rota's RabbitMQ topology (DESIGN.md §5), in one place.

Queue arguments are part of the wire contract: re-declaring a queue with other arguments fails
(``PRECONDITION_FAILED``), so they are declared explicitly and never left to broker defaults
that differ between RabbitMQ 3.x and 4.x. Everything here works on 3.10 and 4.x alike: classic
queues (quorum queues refuse ``x-max-priority`` before 4.0), per-consumer prefetch, no
3.12+ arguments.

::

    (default)        direct  --{prefix}.jobs.{group}-->  {prefix}.jobs.{group}  (one per group)
    {prefix}.status  fanout  ------------->    {prefix}.status
    {prefix}.logs    fanout  ------------->    {prefix}.logs
    {prefix}.dlx     fanout  ------------->    {prefix}.dlq   (job queues dead-letter here)
"""

from __future__ import annotations

from dataclasses import dataclass

from rota.core.wire import (
    CONTENT_TYPE,
    HEADER_MAX_RETRIES,
    HEADER_ORIGINAL_CORRELATION_ID,
    HEADER_RETRY_COUNT,
)

DEFAULT_PREFIX = "rota"

MAX_PRIORITY = 4
"""Job queues take priorities 0 (VeryLow) … 4 (Critical)."""
QUEUE_TYPE = "classic"
PERSISTENT = 2
"""``delivery_mode`` of every message Rota publishes."""

STATUS_EXCHANGE_TYPE = "fanout"
LOGS_EXCHANGE_TYPE = "fanout"
DLX_EXCHANGE_TYPE = "fanout"

ARG_QUEUE_TYPE = "x-queue-type"
ARG_MAX_PRIORITY = "x-max-priority"
ARG_DEAD_LETTER_EXCHANGE = "x-dead-letter-exchange"

__all__ = [
    "ARG_DEAD_LETTER_EXCHANGE",
    "ARG_MAX_PRIORITY",
    "ARG_QUEUE_TYPE",
    "CONTENT_TYPE",
    "DEFAULT_PREFIX",
    "DLX_EXCHANGE_TYPE",
    "HEADER_MAX_RETRIES",
    "HEADER_ORIGINAL_CORRELATION_ID",
    "HEADER_RETRY_COUNT",
    "LOGS_EXCHANGE_TYPE",
    "MAX_PRIORITY",
    "PERSISTENT",
    "QUEUE_TYPE",
    "STATUS_EXCHANGE_TYPE",
    "AmqpNames",
]


@dataclass(frozen=True, slots=True)
class AmqpNames:
    """The names of one Rota installation's exchanges and queues, under ``prefix``."""

    prefix: str = DEFAULT_PREFIX

    @property
    def status_exchange(self) -> str:
        return f"{self.prefix}.status"

    @property
    def status_queue(self) -> str:
        return f"{self.prefix}.status"

    @property
    def logs_exchange(self) -> str:
        return f"{self.prefix}.logs"

    @property
    def logs_queue(self) -> str:
        return f"{self.prefix}.logs"

    @property
    def dead_letter_exchange(self) -> str:
        return f"{self.prefix}.dlx"

    @property
    def dead_letter_queue(self) -> str:
        return f"{self.prefix}.dlq"

    def job_queue(self, worker_id: str) -> str:
        """The job queue of a worker group: also the routing key, on the default exchange,
        of the job messages sent to the group."""
        return f"{self.prefix}.jobs.{worker_id}"

    def job_queue_arguments(self) -> dict[str, str | int]:
        return {
            ARG_QUEUE_TYPE: QUEUE_TYPE,
            ARG_MAX_PRIORITY: MAX_PRIORITY,
            ARG_DEAD_LETTER_EXCHANGE: self.dead_letter_exchange,
        }

    def record_queue_arguments(self) -> dict[str, str | int]:
        """Arguments of the status, log and dead-letter queues."""
        return {ARG_QUEUE_TYPE: QUEUE_TYPE}
