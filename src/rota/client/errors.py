"""The errors the client raises: :class:`ApiError` and a subclass per kind of answer,
made from the API's problem details (RFC 9457)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import orjson

from rota.core.errors import RotaError

if TYPE_CHECKING:
    import httpx


class ApiError(RotaError):
    """The API answered with an error. ``problem`` is its RFC 9457 body (``type``, ``title``,
    ``status``, ``detail``, ``errors`` with the fields at fault)."""

    def __init__(self, status: int, problem: Mapping[str, Any]) -> None:
        detail = problem.get("detail") or problem.get("title") or f"HTTP {status}"
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.problem = dict(problem)

    @property
    def type(self) -> str:
        return str(self.problem.get("type", "about:blank"))

    @property
    def detail(self) -> str | None:
        detail = self.problem.get("detail")
        return None if detail is None else str(detail)

    @property
    def errors(self) -> list[dict[str, Any]]:
        """The fields at fault: ``[{"field": "jobs[17].cronExpression", "message": …}]``."""
        errors = self.problem.get("errors")
        return list(errors) if isinstance(errors, list) else []

    @property
    def fields(self) -> list[str | None]:
        return [error.get("field") for error in self.errors]


class ApiAuthError(ApiError):
    """401 or 403: not signed in (or the session could not be renewed), or not allowed."""


class ApiNotFoundError(ApiError):
    """404."""


class ApiConflictError(ApiError):
    """409 (or 412: the job changed since the ETag sent): a stale change, a trigger refused by
    the Skip policy, an ended occurrence."""


class ApiValidationError(ApiError):
    """422 (or 400): the input was refused; :attr:`fields` names where."""


class ApiPayloadTooLargeError(ApiError):
    """413: the request body is over the server's limit."""


class ApiUnavailableError(ApiError):
    """503: a backend of the server is unreachable; try again later."""


class RunFailedError(RotaError):
    """A run waited for (``handle.result()``) ended without a result: Failed, Cancelled,
    TimedOut or Skipped. ``occurrence`` is the run (``status_name``, ``exception``,
    ``skip_reason``, ``attempt``…)."""

    def __init__(self, occurrence: Any) -> None:
        why = occurrence.exception or occurrence.skip_reason or "no reason given"
        first = str(why).strip().splitlines()[0] if str(why).strip() else why
        super().__init__(
            f"run {occurrence.id} of {occurrence.job_type} ended {occurrence.status_name}: {first}"
        )
        self.occurrence = occurrence
        self.status = str(occurrence.status_name)
        self.exception: str | None = occurrence.exception


_ERRORS: Final[dict[int, type[ApiError]]] = {
    400: ApiValidationError,
    401: ApiAuthError,
    403: ApiAuthError,
    404: ApiNotFoundError,
    409: ApiConflictError,
    412: ApiConflictError,
    413: ApiPayloadTooLargeError,
    422: ApiValidationError,
    503: ApiUnavailableError,
}


def error_from_response(response: httpx.Response, body: bytes) -> ApiError:
    """The error for an answer of status 400 or more, from its problem details (or what
    there is of a body that holds none)."""
    try:
        problem = orjson.loads(body) if body else {}
    except orjson.JSONDecodeError:
        problem = {}
    if not isinstance(problem, dict):
        problem = {}
    problem.setdefault("status", response.status_code)
    problem.setdefault("title", response.reason_phrase)
    if "detail" not in problem and body and not problem.get("type"):
        problem["detail"] = body[:500].decode(errors="replace")
    return _ERRORS.get(response.status_code, ApiError)(response.status_code, problem)
