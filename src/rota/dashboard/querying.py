"""The query field of the list pages (Executions, Failed, Jobs): the same query filter as
the API's ``?q=`` (:mod:`rota.core.query`), read leniently (a bad query is shown as the
page's error, not a failed page), and the qualifiers the field suggests."""

from __future__ import annotations

from typing import Any

from rota.api.strict import list_filter
from rota.core.errors import ValidationError
from rota.core.query import HELP, QUALIFIERS, ListName, QueryFilter

QUERY_PLACEHOLDER: dict[ListName, str] = {
    "occurrences": 'type:report status:failed data.customer:42 after:-1d job:"nightly sales"',
    "failed": "type:report failure:timed_out attempt:>1 data.customer:42",
    "jobs": "type:report worker:reports tag:billing status:paused data.customer:42",
}


def read_query(
    text: str, target: ListName, with_data: bool
) -> tuple[QueryFilter | None, str | None]:
    """The filter ``text`` asks (``None``: none asked, or it was refused), and the error to
    show when it was refused (the list then shows nothing, rather than everything)."""
    if not text.strip():
        return None, None
    try:
        return list_filter(text, target, with_data), None
    except ValidationError as exc:
        return None, f"Query not applied: {exc.message}."


def query_field(target: ListName, text: str, error: str | None = None) -> dict[str, Any]:
    """What ``_query_field.html`` shows: the text, its placeholder and the suggestions (the
    qualifiers ``target`` takes, each with an example); ``error`` for a page that shows no
    error of its own."""
    return {
        "id": f"query-{target}",
        "error": error,
        "text": text,
        "placeholder": QUERY_PLACEHOLDER[target],
        "qualifiers": [
            ("data.customer:" if q == "data." else f"{q}:", HELP[q]) for q in QUALIFIERS[target]
        ],
    }
