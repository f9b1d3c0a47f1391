"""Start-up: wait for the backing services with clear messages, instead of failing on the
first refused connection (a server or worker started together with its database and broker,
as under docker-compose or Kubernetes, usually comes up first)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from rota.core.errors import BackendUnavailableError
from rota.core.redact import mask_url, mask_urls

log = logging.getLogger(__name__)

FIRST_DELAY = 0.5
MAX_DELAY = 5.0


def redact_url(url: str) -> str:
    """``url`` as it may be printed or logged: :func:`rota.core.redact.mask_url` (its
    password and secret query parameters hidden)."""
    return mask_url(url)


async def wait_for(
    service: str,
    url: str,
    attempt: Callable[[], Awaitable[object]],
    *,
    within: float,
) -> None:
    """Run ``attempt`` until it succeeds, retrying while it raises
    :class:`BackendUnavailableError` or ``OSError``, for at most ``within`` seconds (0: try
    once). Each failed try is logged naming the service and its URL (password hidden); when
    time is up, :class:`BackendUnavailableError` says which service did not answer."""
    deadline = time.monotonic() + within
    delay = FIRST_DELAY
    tries = 0
    where = redact_url(url)
    while True:
        tries += 1
        try:
            await attempt()
        except (BackendUnavailableError, OSError) as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BackendUnavailableError(
                    f"{service} at {where} did not answer within {within:g} s "
                    f"({tries} tries): {mask_urls(str(exc))}"
                ) from exc
            log.warning(
                "waiting for %s at %s (try %d, %.0f s left): %s",
                service, where, tries, left, mask_urls(str(exc)),
                extra={"action": "wait_for_dependency", "service": service},
            )  # fmt: skip
            await asyncio.sleep(min(delay, left))
            delay = min(delay * 2, MAX_DELAY)
            continue
        if tries > 1:
            log.info("%s at %s is up", service, where, extra={"service": service})
        return
