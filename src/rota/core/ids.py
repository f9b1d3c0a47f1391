"""Identifiers: UUIDv7 (time-ordered), also used as correlation ids."""

from __future__ import annotations

import uuid

import uuid_utils


def new_id() -> uuid.UUID:
    """A new UUIDv7 as a standard :class:`uuid.UUID`."""
    return uuid.UUID(bytes=uuid_utils.uuid7().bytes)


def bucket_of(job_id: uuid.UUID, bucket_count: int) -> int:
    """The schedule bucket of a job: its id modulo the bucket count (low bits are random)."""
    return job_id.int % bucket_count
