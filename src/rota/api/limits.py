"""The input limits every request meets before any route sees it: the size of its query
string, its headers and its body, and how deeply a JSON body nests.

Each refusal is a problem (RFC 9457): 414 for a query string, 431 for headers, 413 for a
body over the size limit, 422 naming the field for a JSON body nested too deeply. The nesting
is measured on the raw body by :func:`rota.core.jsonlimits.too_deep_at` (no parse, no
recursion) before FastAPI parses it, so no body can make the JSON reader recurse past its
limit. Free-form values inside a body (``jobData``) are held to ``max_json_depth`` by the job
service, which names them exactly (``jobs[3].jobData``); the body as a whole may nest
:data:`ENVELOPE_LEVELS` more, for its own structure.
"""

from __future__ import annotations

from dataclasses import dataclass
from email.message import Message as MimeMessage
from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rota.api.problems import (
    HEADERS_TOO_LARGE,
    TOO_LARGE,
    URI_TOO_LONG,
    VALIDATION,
    FieldError,
    field_path,
    problem_response,
)
from rota.core.jsonlimits import DEFAULT_JSON_DEPTH, Location, too_deep_at

MAX_BODY_BYTES: Final = 16 * 1024 * 1024
"""The default request body limit (``ROTA_API__MAX_BODY_BYTES``)."""
MAX_QUERY_BYTES: Final = 8 * 1024
"""The default query string limit (``ROTA_API__MAX_QUERY_BYTES``)."""
MAX_HEADER_BYTES: Final = 32 * 1024
"""The default limit of all request headers together (``ROTA_API__MAX_HEADER_BYTES``)."""
ENVELOPE_LEVELS: Final = 4
"""How much deeper than ``max_json_depth`` a body may nest: a free-form value sits a few levels
down in its body (``{"jobs": [{"jobData": …}]}``, ``{"jobData": {"value": …}}``)."""
FIELD_SEGMENTS: Final = 3
"""A body nested too deeply is refused naming at most this many levels of the path to where it
goes too deep (``jobs[3].jobData``), not the whole path down."""
_BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH"})


@dataclass(frozen=True, slots=True, kw_only=True)
class InputLimits:
    """The limits of :class:`InputLimitMiddleware` (``ROTA_API__…`` settings)."""

    max_body_bytes: int = MAX_BODY_BYTES
    max_json_depth: int = DEFAULT_JSON_DEPTH
    max_query_bytes: int = MAX_QUERY_BYTES
    max_header_bytes: int = MAX_HEADER_BYTES

    @property
    def max_body_depth(self) -> int:
        return self.max_json_depth + ENVELOPE_LEVELS


def too_deep_field(location: Location) -> str:
    """The field a body nested too deeply is refused on: the first levels of the path to
    where it goes too deep, without trailing array indices (``jobData`` for ``{"jobData":
    [[[…]]]}``, ``jobs[3].jobData`` in a bulk create; ``body`` for a bare array)."""
    kept = list(location[:FIELD_SEGMENTS])
    while kept and isinstance(kept[-1], int):
        kept.pop()
    return field_path(("body", *kept)) or "body"


def _is_json(scope: Scope) -> bool:
    """Whether FastAPI reads this body as JSON: no content type, or ``application/json`` or
    ``application/*+json`` (forms and other types are not parsed as JSON)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            mime = MimeMessage()
            mime["content-type"] = value.decode("latin-1")
            subtype = mime.get_content_subtype()
            return mime.get_content_maintype() == "application" and (
                subtype == "json" or subtype.endswith("+json")
            )
    return True


class InputLimitMiddleware:
    """Refuse requests over the :class:`InputLimits` with a problem, before routing.

    The declared ``Content-Length`` is checked first; bodies without one are read up to the
    limit before the application sees them. A JSON body is then measured for nesting.
    """

    def __init__(self, app: ASGIApp, limits: InputLimits | None = None) -> None:
        self.app = app
        self.limits = limits or InputLimits()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limits = self.limits
        query = scope.get("query_string", b"")
        if len(query) > limits.max_query_bytes:
            detail = f"the query string is longer than {limits.max_query_bytes} bytes"
            await _refuse(scope, receive, send, 414, detail, URI_TOO_LONG)
            return
        headers = scope.get("headers", ())
        header_bytes = sum(len(name) + len(value) for name, value in headers)
        if header_bytes > limits.max_header_bytes:
            detail = f"the request headers are larger than {limits.max_header_bytes} bytes"
            await _refuse(scope, receive, send, 431, detail, HEADERS_TOO_LARGE)
            return
        if _declared_length(scope) > limits.max_body_bytes:
            await self._too_large(scope, receive, send)
            return
        if scope["method"] not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        body = await self._read(receive)
        if body is None:
            await self._too_large(scope, receive, send)
            return
        if body and _is_json(scope):
            location = too_deep_at(body, limits.max_body_depth)
            if location is not None:
                await self._too_deep(scope, receive, send, too_deep_field(location))
                return
        await self.app(scope, _replay(body, receive), send)

    async def _read(self, receive: Receive) -> bytes | None:
        """The whole body, or ``None`` once it passes the limit."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return b"".join(chunks)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limits.max_body_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        detail = f"the request body is larger than {self.limits.max_body_bytes} bytes"
        await _refuse(scope, receive, send, 413, detail, TOO_LARGE)

    async def _too_deep(self, scope: Scope, receive: Receive, send: Send, field: str) -> None:
        depth = self.limits.max_body_depth
        message = (
            f"{field}: nested more than {depth} levels deep (the body's limit; "
            f"ROTA_API__MAX_JSON_DEPTH is {self.limits.max_json_depth})"
        )
        response = problem_response(
            scope.get("path"),
            422,
            detail=message,
            type_=VALIDATION,
            errors=[FieldError(field=field, message=message)],
        )
        await response(scope, receive, send)


def _declared_length(scope: Scope) -> int:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return 0
    return 0


async def _refuse(
    scope: Scope, receive: Receive, send: Send, status: int, detail: str, type_: str
) -> None:
    response = problem_response(scope.get("path"), status, detail=detail, type_=type_)
    await response(scope, receive, send)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
