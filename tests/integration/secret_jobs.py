"""A job type for the secret-reference tests (tests/integration/test_secret_references.py):
it records the data its handler got, logs and returns the token, and fails with it when asked."""

from __future__ import annotations

from typing import Any

import rota

SEEN: list[Any] = []
"""The data each run's handler received, in order."""


@rota.job("secrets.echo", max_retries=0)
def echo(ctx: rota.JobContext, data: dict[str, Any]) -> dict[str, Any]:
    SEEN.append(data)
    token = data["token"]
    ctx.log.info("calling the billing API with %s", token, extra={"sent": token})
    if data.get("fail"):
        raise RuntimeError(f"the billing API refused Authorization: Bearer {token}")
    return {"token": token, "echo": [f"Bearer {token}"]}
