"""Adapter selection by URL (DESIGN.md §1): nothing set means embedded. Imported only by the
composition roots (``runtime.py``, ``worker/process.py``)."""

from __future__ import annotations

from rota.core.errors import ConfigurationError
from rota.core.ports import Broker, Coordination, ScheduleIndex
from rota.settings import Settings


def check_mode(settings: Settings) -> None:
    """The distributed mode needs both Redis and RabbitMQ; say what is missing."""
    if bool(settings.redis_url) != bool(settings.amqp_url):
        missing = "ROTA_AMQP_URL" if settings.redis_url else "ROTA_REDIS_URL"
        raise ConfigurationError(
            f"the distributed mode needs both ROTA_REDIS_URL and ROTA_AMQP_URL: set {missing} "
            "(or unset both to run embedded)"
        )


def make_index(settings: Settings) -> ScheduleIndex:
    check_mode(settings)
    if settings.redis_url:
        from rota.indexes.redis import RedisScheduleIndex

        return RedisScheduleIndex.from_url(settings.redis_url, prefix=settings.name_prefix)
    from rota.indexes.memory import MemoryScheduleIndex

    return MemoryScheduleIndex()


def make_coordination(settings: Settings) -> Coordination:
    check_mode(settings)
    if settings.redis_url:
        from rota.coordination.redis import RedisCoordination

        return RedisCoordination.from_url(settings.redis_url, prefix=settings.name_prefix)
    from rota.coordination.memory import MemoryCoordination

    return MemoryCoordination()


def make_broker(settings: Settings) -> Broker:
    check_mode(settings)
    if settings.amqp_url:
        from rota.brokers.rabbitmq import RabbitMQBroker

        return RabbitMQBroker(settings.amqp_url, prefix=settings.name_prefix)
    from rota.brokers.inprocess import InProcessBroker

    return InProcessBroker(prefix=settings.name_prefix)
