"""The audit log page (Admins): the API's ``/audit`` entries, newest first, filtered by actor,
action and resource type, a page at a time."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Final
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response

from rota.dashboard import session
from rota.dashboard.pages import Cursor, User, api_get, has_route, paging, render

router = APIRouter(include_in_schema=False, dependencies=[Depends(session.require_csrf)])

AUDIT: Final = "/api/v1/audit"
AUDIT_PAGE_SIZE: Final = 50
RESOURCE_PAGES: Final = {"job": "/jobs/{id}", "occurrence": "/executions/{id}"}
"""Where a resource of an entry is shown (the others have no page of their own)."""

Filter = Annotated[str, Query(max_length=100)]


@router.get("/audit")
async def audit_page(
    request: Request,
    user: User,
    actor: Filter = "",
    action: Filter = "",
    resource_type: Annotated[str, Query(alias="resourceType", max_length=50)] = "",
    cursor: Cursor = None,
) -> Response:
    available = has_route(request, AUDIT)
    filters = {"actor": actor.strip(), "action": action.strip(), "resourceType": resource_type}
    entries: list[dict[str, Any]] = []
    next_cursor = None
    error = None
    if available and user.is_admin:
        params = {k: v for k, v in filters.items() if v}
        params["limit"] = str(AUDIT_PAGE_SIZE)
        if cursor:
            params["cursor"] = cursor
        status, body = await api_get(request, f"{AUDIT}?{urlencode(params)}")
        if status == 200 and isinstance(body, dict):
            entries = [_entry(e) for e in body.get("items", [])]
            next_cursor = body.get("nextCursor")
        else:
            error = f"The API answered {status}."
    context = {
        "entries": entries,
        "filters": filters,
        "available": available,
        "error": error,
        **paging(request, cursor, next_cursor),
    }
    return render(request, user, "audit.html", context)


def _entry(raw: dict[str, Any]) -> dict[str, Any]:
    """An entry as the page shows it: the resource's page (if it has one) and the states as
    indented JSON."""
    kind, rid = raw.get("resourceType") or "", raw.get("resourceId")
    page = RESOURCE_PAGES.get(kind)
    try:
        at: datetime | None = datetime.fromisoformat(str(raw.get("at")).replace("Z", "+00:00"))
    except ValueError:
        at = None
    return {
        **raw,
        "at": at,
        "link": page.format(id=rid) if page and rid else None,
        "before_text": None if raw.get("before") is None else json.dumps(raw["before"], indent=2),
        "after_text": None if raw.get("after") is None else json.dumps(raw["after"], indent=2),
    }
