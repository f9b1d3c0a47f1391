"""RFC 9457 problem details for every error the API returns, and the request guards.

Rota errors carry meaning (:mod:`rota.core.errors`); this module alone maps them to HTTP.
"""

from __future__ import annotations

import http
import json
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rota.core.errors import (
    AccountLockedError,
    AuthenticationError,
    BackendUnavailableError,
    ConflictError,
    CronError,
    NotFoundError,
    OverloadedError,
    PermissionDeniedError,
    PreconditionFailedError,
    RateLimitedError,
    UnknownParameterError,
    ValidationError,
)
from rota.core.jobfields import api_name

logger = logging.getLogger(__name__)

PROBLEM_JSON: Final = "application/problem+json"
VALIDATION: Final = "urn:rota:problem:validation"
NOT_FOUND: Final = "urn:rota:problem:not-found"
CONFLICT: Final = "urn:rota:problem:conflict"
PRECONDITION: Final = "urn:rota:problem:precondition-failed"
UNAVAILABLE: Final = "urn:rota:problem:backend-unavailable"
TOO_LARGE: Final = "urn:rota:problem:payload-too-large"
URI_TOO_LONG: Final = "urn:rota:problem:uri-too-long"
HEADERS_TOO_LARGE: Final = "urn:rota:problem:headers-too-large"
INTERNAL: Final = "urn:rota:problem:internal"
UNAUTHORIZED: Final = "urn:rota:problem:unauthorized"
FORBIDDEN: Final = "urn:rota:problem:forbidden"
LOCKED: Final = "urn:rota:problem:locked"
RATE_LIMITED: Final = "urn:rota:problem:rate-limited"
OVERLOADED: Final = "urn:rota:problem:overloaded"
WWW_AUTHENTICATE: Final = 'Bearer realm="rota"'

_LOCATIONS: Final = frozenset({"body", "query", "path", "header", "cookie"})
_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class FieldError(BaseModel):
    field: str | None = Field(description="The input field (camelCase; nested as a.b[0]).")
    message: str
    part: str | None = Field(None, description="For cron errors: the cron field that is wrong.")


class Problem(BaseModel):
    """An RFC 9457 problem detail."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None
    errors: list[FieldError] = Field(default_factory=list)


def problem_response(
    instance: str | None,
    status: int,
    *,
    detail: str | None = None,
    type_: str = "about:blank",
    errors: Iterable[FieldError] = (),
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    errors = list(errors)
    body = Problem(
        type=type_,
        title=http.HTTPStatus(status).phrase,
        status=status,
        detail=detail,
        instance=instance,
        errors=errors,
    ).model_dump(mode="json", exclude_none=True)
    # An error's ``field`` is always there (``null``: the input as a whole), as documented.
    body["errors"] = [
        error.model_dump(mode="json", exclude_none=True) | {"field": error.field}
        for error in errors
    ]
    return ProblemResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


class ProblemResponse(JSONResponse):
    """A problem as ASCII JSON: a message quoting input (an unknown field's name) stays
    writable even if that input holds a lone surrogate, which UTF-8 cannot encode."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode()


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries documenting problem bodies for these statuses."""
    return {
        status: {
            "model": Problem,
            "description": http.HTTPStatus(status).phrase,
            "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for status in statuses
    }


_FASTAPI_422: Final = ("HTTPValidationError", "ValidationError")
"""FastAPI's own 422 body schemas, which Rota never sends (its 422 is a Problem)."""


def document_input_errors(spec: dict[str, Any]) -> dict[str, Any]:
    """Every operation that takes input documents its 422 problem (in place of FastAPI's
    default ``HTTPValidationError``, which is not what Rota sends), every POST, PUT and
    PATCH its 413 (the body limit applies to them all), and every operation its 414 and 431
    (the query string and header limits apply to every request), so a new route is described
    right without repeating it."""
    for item in spec.get("paths", {}).values():
        for method, operation in item.items():
            responses = operation.setdefault("responses", {})
            for status in (414, 431):
                responses.setdefault(str(status), _problem_entry(status))
            if operation.get("parameters") or "requestBody" in operation:
                current = responses.get("422", {}).get("content", {})
                if PROBLEM_JSON not in current:
                    responses["422"] = _problem_entry(422)
            if method in ("post", "put", "patch"):
                responses.setdefault("413", _problem_entry(413))
    schemas = spec.get("components", {}).get("schemas", {})
    if "#/components/schemas/HTTPValidationError" not in json.dumps(spec.get("paths", {})):
        for name in _FASTAPI_422:  # HTTPValidationError and the ValidationError it holds
            schemas.pop(name, None)
    return spec


def _problem_entry(status: int) -> dict[str, Any]:
    (entry,) = problem_responses(status).values()
    return {key: value for key, value in entry.items() if key != "model"}


def problem_json_only(spec: dict[str, Any]) -> dict[str, Any]:
    """Error responses are documented as ``application/problem+json`` only (FastAPI adds a
    twin in the route's own media type for every response ``model``: ``application/json``, or
    ``text/event-stream`` on the event stream)."""
    for item in spec.get("paths", {}).values():
        for operation in item.values():
            for response in operation.get("responses", {}).values():
                content = response.get("content", {})
                if PROBLEM_JSON in content:
                    for media_type in [m for m in content if m != PROBLEM_JSON]:
                        del content[media_type]
    return spec


# --- exception handlers ----------------------------------------------------------------------


def field_path(loc: Sequence[int | str]) -> str | None:
    """``("body", "jobs", 3, "cron_expression")`` -> ``jobs[3].cronExpression``; the body as a
    whole is ``body``. Pydantic's union member tags (``list[str]``) are left out."""
    where = loc[0] if loc and loc[0] in _LOCATIONS else None
    if where == "header" and len(loc) == 2:
        return str(loc[1])  # a header by its own name: If-Match
    path = ""
    for part in loc[1:] if where else loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif _NAME.fullmatch(part):
            path += ("." if path else "") + api_name(part)
    return path or ("body" if where == "body" else None)


def _message(error: Mapping[str, Any]) -> str:
    if error.get("type") == "json_invalid":
        return f"the body is not valid JSON ({error.get('ctx', {}).get('error', 'parse error')})"
    return str(error.get("msg", "invalid")).removeprefix("Value error, ")


def _request_invalid(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = []
    for error in exc.errors():
        loc = tuple(error.get("loc", ()))
        field = "body" if error.get("type") == "json_invalid" else field_path(loc)
        errors.append(FieldError(field=field, message=_message(error)))
    detail = errors[0].message if len(errors) == 1 else f"{len(errors)} fields are invalid"
    return problem_response(request.url.path, 422, detail=detail, type_=VALIDATION, errors=errors)


def _field_error(exc: ValidationError) -> FieldError:
    part = exc.part if isinstance(exc, CronError) else None
    return FieldError(field=exc.field, message=exc.message, part=part)


def _rota_invalid(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ValidationError)
    errors = [_field_error(e) for e in exc.errors] or [_field_error(exc)]
    status = 400 if isinstance(exc, UnknownParameterError) else 422
    return problem_response(
        request.url.path, status, detail=exc.message, type_=VALIDATION, errors=errors
    )


def _not_found(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, NotFoundError)
    return problem_response(request.url.path, 404, detail=exc.message, type_=NOT_FOUND)


def _conflict(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ConflictError)
    return problem_response(request.url.path, 409, detail=exc.message, type_=CONFLICT)


def _precondition(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, PreconditionFailedError)
    return problem_response(request.url.path, 412, detail=exc.message, type_=PRECONDITION)


def _unavailable(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, BackendUnavailableError)
    logger.warning("backend unavailable: %s", exc.message, extra={"path": request.url.path})
    headers = {"Retry-After": "5"}
    return problem_response(
        request.url.path, 503, detail=exc.message, type_=UNAVAILABLE, headers=headers
    )


def _unauthenticated(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, AuthenticationError)
    if isinstance(exc, AccountLockedError):
        headers = {"Retry-After": str(exc.retry_after)}
        return problem_response(
            request.url.path, 429, detail=exc.message, type_=LOCKED, headers=headers
        )
    error = ', error="invalid_token"' if exc.message.startswith("invalid access token") else ""
    headers = {"WWW-Authenticate": WWW_AUTHENTICATE + error}
    return problem_response(
        request.url.path, 401, detail=exc.message, type_=UNAUTHORIZED, headers=headers
    )


def _rate_limited(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RateLimitedError)
    headers = {"Retry-After": str(exc.retry_after)}
    return problem_response(
        request.url.path, 429, detail=exc.message, type_=RATE_LIMITED, headers=headers
    )


def _overloaded(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, OverloadedError)
    headers = {"Retry-After": str(exc.retry_after)}
    return problem_response(
        request.url.path, 503, detail=exc.message, type_=OVERLOADED, headers=headers
    )


def _forbidden(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, PermissionDeniedError)
    field = getattr(exc, "field", None)  # a scoped API key's refusal names the field
    errors = [FieldError(field=field, message=exc.message)] if field else []
    return problem_response(
        request.url.path, 403, detail=exc.message, type_=FORBIDDEN, errors=errors
    )


def _unreadable(cause: BaseException) -> str:
    if isinstance(cause, UnicodeDecodeError):
        return f"not UTF-8 text: {cause.reason}"
    if isinstance(cause, RecursionError):
        return "nested too deeply"
    return str(cause) if isinstance(cause, ValueError) else "unreadable"


def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400 and exc.__cause__ is not None:
        # FastAPI's "error parsing the body": the JSON reader failed other than on syntax.
        message = f"the body is not valid JSON ({_unreadable(exc.__cause__)})"
        error = FieldError(field="body", message=message)
        return problem_response(
            request.url.path, 422, detail=message, type_=VALIDATION, errors=[error]
        )
    detail = exc.detail if isinstance(exc.detail, str) else None
    return problem_response(request.url.path, exc.status_code, detail=detail, headers=exc.headers)


def install_problem_handlers(app: FastAPI) -> None:
    """Problem details for every error: handlers for the known ones, middleware for the rest
    (installed last: it wraps every other middleware, the input limits too)."""
    app.add_exception_handler(RequestValidationError, _request_invalid)
    app.add_exception_handler(ValidationError, _rota_invalid)
    app.add_exception_handler(NotFoundError, _not_found)
    app.add_exception_handler(ConflictError, _conflict)
    app.add_exception_handler(PreconditionFailedError, _precondition)
    app.add_exception_handler(BackendUnavailableError, _unavailable)
    app.add_exception_handler(AuthenticationError, _unauthenticated)
    app.add_exception_handler(PermissionDeniedError, _forbidden)
    app.add_exception_handler(RateLimitedError, _rate_limited)
    app.add_exception_handler(OverloadedError, _overloaded)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_middleware(UnhandledErrorMiddleware)


# --- middleware ------------------------------------------------------------------------------


class UnhandledErrorMiddleware:
    """Any exception no handler took becomes a logged 500 problem (never a bare 500)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watch(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except Exception:
            logger.exception("unhandled error", extra={"path": scope.get("path")})
            if started:
                raise
            response = problem_response(
                scope.get("path"),
                500,
                detail="an unexpected error occurred; it was logged",
                type_=INTERNAL,
            )
            await response(scope, receive, send)
