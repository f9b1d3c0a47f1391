"""Identifiers: UUIDv7 (time-ordered), also used as correlation ids."""

from __future__ import annotations

import uuid

from uuid_utils import compat


def new_id() -> uuid.UUID:
    """A new UUIDv7 as a standard :class:`uuid.UUID` (``uuid_utils.compat`` makes it one
    without the copy through bytes)."""
    return compat.uuid7()


def bucket_of(job_id: uuid.UUID, bucket_count: int) -> int:
    """The schedule bucket of a job: its id modulo the bucket count (low bits are random)."""
    return job_id.int % bucket_count
