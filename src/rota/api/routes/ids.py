"""Which records a shown part of an id stands for: the dashboard shows ``…0e59d72df1bc``, a
person types it; the CLI turns it into the whole id here."""

from __future__ import annotations

import re
from typing import Annotated, Final
from uuid import UUID

from fastapi import APIRouter, Query
from pydantic import Field

from rota.api.deps import Lookup
from rota.api.problems import problem_responses
from rota.api.schemas.common import NO_NUL, ApiModel
from rota.api.security import requires
from rota.core.errors import ValidationError
from rota.core.ports.lookup import ID_WINDOW, IdKind
from rota.core.security import Role

router = APIRouter(prefix="/ids", tags=["ids"], dependencies=[requires(Role.VIEWER)])

MIN_DIGITS: Final = 4
MAX_MATCHES: Final = 10
_SHOWN: Final = re.compile(r"^(?:…|\.\.\.)?(?P<digits>[0-9a-fA-F-]+?)(?:…|\.\.\.)?$")


class IdMatches(ApiModel):
    kind: IdKind
    fragment: str = Field(description="The hex digits matched (lower case, no hyphens).")
    ids: list[UUID] = Field(
        description=f"The ids that start or end with them, newest first (at most "
        f"{MAX_MATCHES}): one is a match, none or several are not."
    )
    window: int = Field(description="How many of the newest records of the kind were searched.")


def fragment_of(shown: str) -> str:
    """``…0e59d72df1bc``, ``0e59d72d-f1bc``, ``019AD1C3…`` -> the hex digits, lower case."""
    found = _SHOWN.match(shown.strip())
    digits = found.group("digits").replace("-", "").lower() if found else ""
    if not MIN_DIGITS <= len(digits) <= 32:
        raise ValidationError(
            f"give {MIN_DIGITS} to 32 hex digits of an id (a leading or trailing … is ignored)",
            field="id",
        )
    return digits


@router.get(
    "",
    responses=problem_responses(422, 503),
    summary="The ids that start or end with the given digits",
    description="What the dashboard shows of an id (`…0e59d72df1bc`, the last 12 digits) or "
    "its first digits, turned into the whole id: matched among the newest "
    f"{ID_WINDOW:,} records of the kind (ids are time-ordered), so an older record needs "
    "its whole id.",
)
async def match_ids(
    lookup: Lookup,
    kind: Annotated[IdKind, Query(description="job, occurrence, failed or graph_run.")],
    shown: Annotated[
        str,
        Query(
            alias="id",
            min_length=1,
            max_length=100,
            pattern=NO_NUL,
            description="Part of an id: its first or last hex digits (4 or more).",
        ),
    ],
) -> IdMatches:
    digits = fragment_of(shown)
    ids = await lookup.match_ids(kind, digits, window=ID_WINDOW, limit=MAX_MATCHES)
    return IdMatches(kind=kind, fragment=digits, ids=ids, window=ID_WINDOW)
