"""Who may call what: the signed-in user of a request, and a role check for every route.

A request is signed in by ``Authorization: Bearer <access token>`` or, for the dashboard and
``EventSource`` (which cannot set headers), by the ``rota_access`` cookie. A cookie-signed
request that changes something (any method but GET/HEAD/OPTIONS) must also carry the header
``X-Rota-CSRF: 1``, which a cross-site form or image cannot send.

Routes declare their role with :func:`requires` (router-wide for reads, per route for
changes); :func:`route_role` reads it back for the OpenAPI document and the tests.
"""

from __future__ import annotations

import http
from typing import Annotated, Any, Final

from fastapi import Depends, FastAPI, Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from rota.api.deps import get_runtime
from rota.api.problems import PROBLEM_JSON, Problem
from rota.api.scopes import check_scope
from rota.core.errors import AuthenticationError, PermissionDeniedError
from rota.core.security import ExceptionText, Principal, Role, exception_message

ACCESS_COOKIE: Final = "rota_access"
REFRESH_COOKIE: Final = "rota_refresh"
CSRF_HEADER: Final = "X-Rota-CSRF"
API_KEY_HEADER: Final = "X-API-Key"
SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
PUBLIC: Final = "public"
"""The role name of a route anyone may call (login, refresh, health)."""


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if header is None:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthenticationError(
            "invalid access token: the Authorization header must be 'Bearer <token>'"
        )
    return token.strip()


async def current_user(request: Request) -> Principal:
    """The signed-in user, or the API key (``Authorization: Bearer rota_…`` or
    ``X-API-Key: rota_…``): ``AuthenticationError`` (401) without a valid access token or
    key; ``PermissionDeniedError`` (403) for a cookie-signed change without
    ``X-Rota-CSRF: 1``."""
    runtime = get_runtime(request)
    auth = runtime.auth
    token = _bearer(request)
    api_key = request.headers.get(API_KEY_HEADER)
    if api_key is not None and token is None:
        return await runtime.api_keys.authenticate(api_key)
    if token is not None:
        if runtime.api_keys.is_key(token):
            return await runtime.api_keys.authenticate(token)
        return await auth.authenticate(token)
    cookie = request.cookies.get(ACCESS_COOKIE)
    if not cookie:
        raise AuthenticationError(
            "authentication required: send 'Authorization: Bearer <access token>' "
            "(POST /api/v1/auth/login gives one)"
        )
    principal = await auth.authenticate(cookie)
    if request.method not in SAFE_METHODS and request.headers.get(CSRF_HEADER) != "1":
        raise PermissionDeniedError(
            f"a change signed in by cookie must send the header {CSRF_HEADER}: 1"
        )
    return principal


class RoleCheck:
    """A dependency: the signed-in user, if its role is ``role`` or higher (else 403)."""

    def __init__(self, role: Role) -> None:
        self.role = role

    async def __call__(
        self, request: Request, user: Annotated[Principal, Depends(current_user)]
    ) -> Principal:
        if not user.role.allows(self.role):
            raise PermissionDeniedError(
                f"this needs the {self.role.value} role (or higher); "
                f"{user.username} is {user.role.value}"
            )
        await check_scope(request, user)
        return user

    def __repr__(self) -> str:
        return f"RoleCheck({self.role.value})"


_CHECKS: Final = {role: RoleCheck(role) for role in Role}


def requires(role: Role) -> Any:
    """``Depends`` on the role check of ``role``: in ``dependencies=[…]`` of a router or a
    route, or as a parameter's ``Annotated`` metadata (it gives the :class:`Principal`)."""
    return Depends(_CHECKS[role])


ViewerUser = Annotated[Principal, requires(Role.VIEWER)]
OperatorUser = Annotated[Principal, requires(Role.OPERATOR)]
AdminUser = Annotated[Principal, requires(Role.ADMIN)]
SignedIn = ViewerUser
"""Any signed-in user (every role may)."""


def _whole(text: str | None) -> str | None:
    return text


def exception_view(role: Role, viewer_tracebacks: bool) -> ExceptionText:
    """How an execution's exception is shown to a user of ``role``: whole, or to a Viewer
    when ``viewer_tracebacks`` (``ROTA_API__VIEWER_TRACEBACKS``) is off, its message without
    the traceback."""
    if role is Role.VIEWER and not viewer_tracebacks:
        return exception_message
    return _whole


async def _exception_text(request: Request, user: ViewerUser) -> ExceptionText:
    return exception_view(user.role, get_runtime(request).settings.api.viewer_tracebacks)


ShownException = Annotated[ExceptionText, Depends(_exception_text)]
"""A route parameter: the caller's :func:`exception_view`."""


def sees_job_data(role: Role, viewer_job_data: bool) -> bool:
    """Whether a caller of ``role`` (whatever its credential) is shown job data: Operators
    and Admins always, Viewers only when ``viewer_job_data`` (``ROTA_API__VIEWER_JOB_DATA``)."""
    return role is not Role.VIEWER or viewer_job_data


async def _job_data_shown(request: Request, user: ViewerUser) -> bool:
    return sees_job_data(user.role, get_runtime(request).settings.api.viewer_job_data)


JobDataShown = Annotated[bool, Depends(_job_data_shown)]
"""A route parameter: whether the caller is shown job data (:func:`sees_job_data`); if not,
the route answers each model's ``redacted()``."""


def _roles(dependant: Dependant) -> set[Role]:
    found: set[Role] = set()
    for sub in dependant.dependencies:
        if isinstance(sub.call, RoleCheck):
            found.add(sub.call.role)
        found |= _roles(sub)
    return found


def api_routes(app: FastAPI) -> list[Any]:
    """The app's API routes as they are served: each with its full ``path``, ``methods``,
    ``endpoint`` and ``dependant`` (the router's dependencies included)."""
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:  # FastAPI before lazily included routers: the routes are flat
        return [r for r in app.routes if isinstance(r, APIRoute)]
    return [c for c in iter_route_contexts(app.routes) if isinstance(c.original_route, APIRoute)]


def route_role(route: Any) -> Role | None:
    """The role a route (from :func:`api_routes`) needs: the highest it checks, or ``None``
    if it checks none."""
    roles = _roles(route.dependant)
    return max(roles, key=lambda r: r.rank) if roles else None


# --- OpenAPI ---------------------------------------------------------------------------------

SECURITY_SCHEMES: Final = {
    "bearer": {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
        "description": "An access token from POST /api/v1/auth/login (15 minutes at most).",
    },
    "apiKey": {
        "type": "apiKey",
        "in": "header",
        "name": API_KEY_HEADER,
        "description": "An API key (rota_<id>_<secret>, from POST /api/v1/api-keys); it may "
        "also be sent as 'Authorization: Bearer <key>'.",
    },
    "cookie": {
        "type": "apiKey",
        "in": "cookie",
        "name": ACCESS_COOKIE,
        "description": "The dashboard's cookie (set by login and refresh); changes also need "
        f"the header {CSRF_HEADER}: 1.",
    },
}


def _problem(status: int, text: str) -> dict[str, Any]:
    return {
        "description": f"{http.HTTPStatus(status).phrase}: {text}",
        "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
    }


def document_roles(app: FastAPI, spec: dict[str, Any], public: frozenset[str]) -> None:
    """Write each route's role into its OpenAPI operation: the ``x-rota-role`` extension, a
    line at the top of its description, its security requirement, and the 401 and 403
    problems. Routes in ``public`` (paths) need no token."""
    spec.setdefault("components", {}).setdefault("securitySchemes", {}).update(SECURITY_SCHEMES)
    schemas = spec["components"].setdefault("schemas", {})
    if "Problem" not in schemas:
        problem = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(problem.pop("$defs", {}))
        schemas["Problem"] = problem
    for route in api_routes(app):
        if not route.include_in_schema:
            continue
        role = route_role(route)
        for method in route.methods or ():
            operation = spec["paths"].get(route.path_format, {}).get(method.lower())
            if operation is None:
                continue
            _document(operation, role, route.path_format in public)


def _document(operation: dict[str, Any], role: Role | None, public: bool) -> None:
    description = operation.get("description", "")
    if role is None:
        operation["x-rota-role"] = PUBLIC
        operation["security"] = []
        line = "**Role:** none (public: no token needed)." if public else "**Role:** none."
        operation["description"] = f"{line}\n\n{description}".strip()
        return
    operation["x-rota-role"] = role.value
    operation["security"] = [{"bearer": []}, {"apiKey": []}, {"cookie": []}]
    higher = "" if role is Role.ADMIN else " or higher"
    line = f"**Role:** {role.value}{higher}."
    operation["description"] = f"{line}\n\n{description}".strip()
    responses = operation.setdefault("responses", {})
    responses.setdefault("401", _problem(401, "no, an invalid or an expired access token"))
    responses.setdefault("403", _problem(403, f"the caller's role is below {role.value}"))
