"""What a worker does for a held delivery before its due instant (:mod:`rota.worker.hold`):
its attempt claimed, its data parsed, its context built, so that its start is only its start.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rota.core.models import FailureType, JobMessage
from rota.sdk.context import JobContext
from rota.sdk.registry import AnyJobDefinition
from rota.worker.claims import ClaimVerdict

__all__ = ["Early", "Parsed", "granted"]


class Early:
    """What was done for a held delivery before its due instant."""

    __slots__ = ("attempt", "claim", "ctx", "parsed", "released", "version")

    def __init__(
        self,
        message: JobMessage,
        claim: asyncio.Future[ClaimVerdict] | None,
        parsed: Parsed,
        ctx: JobContext,
    ) -> None:
        self.attempt = message.attempt
        self.version = message.job_version
        self.claim = claim
        self.parsed = parsed
        self.ctx = ctx
        self.released = False
        """Released by the hold at its due instant, not started yet."""

    def of(self, message: JobMessage) -> bool:
        """Whether this was done for ``message``'s copy (its attempt and job version)."""
        return self.attempt == message.attempt and self.version == message.job_version


Parsed = tuple[AnyJobDefinition, Any] | tuple[None, tuple[FailureType, str]]
"""The definition and parsed data of a message, or ``None`` and why it cannot run."""


def granted(claim: asyncio.Future[ClaimVerdict] | None, claiming: bool) -> bool:
    """Whether a claim made ahead lets the attempt start now without waiting (``claiming``:
    the executor claims attempts; without, there is nothing to wait for)."""
    if claim is None:
        return not claiming
    return (
        claim.done() and not claim.cancelled() and claim.exception() is None and claim.result().run
    )
