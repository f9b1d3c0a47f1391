"""The list routes' query: the query filter (``?q=``, :mod:`rota.core.query`), and query
parameters an operation does not take refused (400, naming the parameter), not
ignored: ``GET /occurrences?jobType=report`` must not answer every occurrence as if no filter
had been asked for.

Put :data:`KNOWN_QUERY` in a route's ``dependencies``; the parameters it allows are those the
route declares, its dependencies' included (read from the route FastAPI matched).
"""

from __future__ import annotations

import difflib
from typing import Any

from fastapi import Depends, Request
from fastapi.dependencies.models import Dependant

from rota.core.errors import UnknownParameterError, ValidationError
from rota.core.models import utcnow
from rota.core.query import FIELD, ListName, QueryFilter, parse_query

QUERY_MAX = 1000
"""Characters of a query filter at most."""


def list_filter(text: str | None, target: ListName, with_data: bool) -> QueryFilter:
    """The filter ``text`` asks of ``target``; a caller who is not shown job data may not
    filter on it either (its answers would tell the data)."""
    found = parse_query(text, target, now=utcnow())
    if found.data and not with_data:
        raise ValidationError(
            "data.<field> filters need a role that is shown job data", field=FIELD
        )
    return found


def declared_query(dependant: Dependant) -> set[str]:
    """The query parameter names (aliases) ``dependant`` and its dependencies take."""
    names = {param.alias for param in dependant.query_params}
    for sub in dependant.dependencies:
        names |= declared_query(sub)
    return names


def unknown_query(names: list[str], allowed: set[str]) -> UnknownParameterError | None:
    """The error for the first of ``names`` not in ``allowed`` (``None``: all known)."""
    for name in names:
        if name in allowed:
            continue
        close = difflib.get_close_matches(name, sorted(allowed), n=1)
        hint = (
            f" (did you mean {close[0]}?)" if close else f" (known: {', '.join(sorted(allowed))})"
        )
        return UnknownParameterError(f'unknown query parameter "{name}"{hint}', field=name)
    return None


async def _known_query(request: Request) -> None:
    route: Any = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if not isinstance(dependant, Dependant):
        return
    error = unknown_query(list(request.query_params.keys()), declared_query(dependant))
    if error is not None:
        raise error


KNOWN_QUERY = Depends(_known_query)
"""A route dependency: 400 for a query parameter the route does not declare."""
