"""Broker adapters (:class:`~rota.core.ports.Broker`): in-process, RabbitMQ."""

from rota.brokers.inprocess import InProcessBroker

__all__ = ["InProcessBroker"]
