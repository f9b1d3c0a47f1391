"""Every Redis key Rota uses, in one place, under a configurable prefix (default ``rota``).

All keys of one deployment start with ``{prefix}:``, so several deployments (or test runs) can
share one Redis and one deployment's keys can be found with ``SCAN MATCH {prefix}:*``. For Redis
Cluster, give a prefix with a hash tag (``{rota}``): the multi-key scripts then stay in one slot.

=================================  ======  =====================================================
key                                type    holds
=================================  ======  =====================================================
``{prefix}:index:{bucket}``        zset    schedule index of one bucket: job id (16 bytes) ->
                                           due time (epoch seconds)
``{prefix}:leases``                hash    bucket -> ``fence:expires_us:owner``
``{prefix}:fences``                hash    bucket -> last fence granted
``{prefix}:instance:{id}``         string  a scheduler instance's info (JSON), with a TTL
``{prefix}:instances``             set     ids of scheduler instances (cleaned when read)
``{prefix}:worker:{id}``           string  a worker instance's registration (JSON), with a TTL
``{prefix}:workers``               set     ids of worker instances (cleaned when read)
``{prefix}:registry``              string  generation token of the worker registry (a new one
                                           means Redis lost the registrations)
``{prefix}:claim:{occ}:{n}``       string  the claim of attempt ``n`` of occurrence ``occ``:
                                           ``{claimed at, epoch ms}:{worker instance id}``
                                           (no instance id: an unknown owner), with a TTL
``{prefix}:claims``                hash    the claim memory's epoch: ``token`` (new after a
                                           loss), ``since`` (ms), ``lost`` (1: a worker knew an
                                           older token, claims from before were lost)
``{prefix}:wakeups``               stream  wake-up signals (field ``due``), capped
``{prefix}:announcements``         stream  "read it again" signals between servers (field
                                           ``topic``: ``dependencies``), capped
``{prefix}:cancellations``         stream  cancellation requests, capped
``{prefix}:events``                stream  change events (``GET /events``): field ``e``, a JSON
                                           array of up to 100 ``[type, data]``; capped
``{prefix}:limits``                string  the job type limits the workers follow (JSON)
``{prefix}:limit:{slot}``          zset    a limit's semaphore: occurrence id -> lease end (ms)
``{prefix}:limit-keys``            set     the semaphores' slot keys
``{prefix}:rate:{type}``           zset    a job type's recent starts (ms), its rate's window
``{prefix}:limit-waiting``         hash    occurrence id -> ``{expires}:{since}:{label}`` (ms)
=================================  ======  =====================================================
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from uuid import UUID

DEFAULT_PREFIX = "rota"

_GLOB_SPECIAL = re.compile(r"([*?\[\]\\])")


@dataclass(frozen=True, slots=True)
class RedisKeys:
    """Key names of one deployment (one prefix)."""

    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        if not self.prefix:
            raise ValueError("the Redis key prefix must not be empty")

    def index(self, bucket: int) -> str:
        return f"{self.prefix}:index:{bucket}"

    @property
    def leases(self) -> str:
        return f"{self.prefix}:leases"

    @property
    def fences(self) -> str:
        return f"{self.prefix}:fences"

    def instance(self, instance_id: str) -> str:
        return f"{self.prefix}:instance:{instance_id}"

    @property
    def instances(self) -> str:
        return f"{self.prefix}:instances"

    def worker(self, instance_id: str) -> str:
        return f"{self.prefix}:worker:{instance_id}"

    @property
    def workers(self) -> str:
        return f"{self.prefix}:workers"

    @property
    def registry(self) -> str:
        return f"{self.prefix}:registry"

    def claim(self, occurrence_id: UUID, attempt: int) -> str:
        return f"{self.prefix}:claim:{occurrence_id}:{attempt}"

    @property
    def claim_epoch(self) -> str:
        return f"{self.prefix}:claims"

    @property
    def wakeups(self) -> str:
        return f"{self.prefix}:wakeups"

    @property
    def announcements(self) -> str:
        return f"{self.prefix}:announcements"

    @property
    def cancellations(self) -> str:
        return f"{self.prefix}:cancellations"

    @property
    def events(self) -> str:
        return f"{self.prefix}:events"

    @property
    def limits(self) -> str:
        return f"{self.prefix}:limits"

    @property
    def limit_keys(self) -> str:
        return f"{self.prefix}:limit-keys"

    @property
    def limit_waiting(self) -> str:
        return f"{self.prefix}:limit-waiting"

    @property
    def pattern(self) -> str:
        """``SCAN MATCH`` pattern of every key under this prefix."""
        return _GLOB_SPECIAL.sub(r"\\\1", self.prefix) + ":*"
