"""A job type for the encryption-at-rest tests (tests/integration/test_encryption_at_rest.py):
it records the data its handler got and returns a secret derived from it."""

from __future__ import annotations

from typing import Any

import rota

SEEN: list[Any] = []
"""The data each run's handler received, in order."""


@rota.job("sealed.echo", max_retries=0)
def echo(ctx: rota.JobContext, data: dict[str, Any]) -> dict[str, Any]:
    SEEN.append(data)
    return {"echo": f"result-{data['token']}"}
