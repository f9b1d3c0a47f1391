"""Alert webhooks: POST an alert as JSON to a URL, bounded by a timeout."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import httpx

from rota.app.settings import http_url
from rota.core.errors import BackendUnavailableError, ConfigurationError
from rota.services.silence import Alert, alert_json


def alert_webhook(url: str, timeout: float) -> Callable[[Alert], Awaitable[None]]:
    """A notifier that POSTs ``{"alert": …}`` to ``url``; a non-2xx answer or a network error
    raises :class:`BackendUnavailableError` (the monitor logs it and goes on). ``url`` must
    be http or https (``ConfigurationError`` otherwise)."""
    try:
        url = http_url(url)
    except ValueError as exc:
        raise ConfigurationError(f"the alert webhook URL {url!r} {exc}") from None

    async def send(alert: Alert) -> None:
        body = {"source": "rota", "alert": alert_json(alert)}
        try:
            async with httpx.AsyncClient(timeout=timeout) as http:
                response = await http.post(url, json=body)
        except httpx.HTTPError as exc:
            raise BackendUnavailableError(f"alert webhook: {exc!r}") from exc
        if response.status_code >= 300:
            raise BackendUnavailableError(f"alert webhook answered {response.status_code}")

    return send
