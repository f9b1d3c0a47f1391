"""Bodies of the health endpoints."""

from __future__ import annotations

from pydantic import Field

from rota.api.schemas.common import ApiModel


class Liveness(ApiModel):
    status: str


class Readiness(ApiModel):
    status: str = Field(description='"ok" when every component is, else "unavailable".')
    components: dict[str, str] = Field(description='Component -> "ok" or its error.')
