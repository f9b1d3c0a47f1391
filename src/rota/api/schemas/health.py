"""Bodies of the health endpoints."""

from __future__ import annotations

from pydantic import Field

from rota.api.schemas.common import ApiModel


class Liveness(ApiModel):
    status: str


class Readiness(ApiModel):
    status: str = Field(description='"ok" when every component is, else "unavailable".')
    components: dict[str, str] = Field(description='Component -> "ok" or its error.')
    warnings: list[str] = Field(
        default_factory=list,
        description="What needs an operator's attention without making the server unavailable: "
        '"dispatching stopped" (an operator stopped it), "silence alerts open". Details: '
        "GET /admin/dispatcher and GET /admin/alerts.",
    )
