"""Sign-in: login, refresh, logout, the signed-in user, and changing one's own password.

Login and refresh answer without a token; they also set the dashboard's cookies
(``rota_access``, ``rota_refresh``: HttpOnly, SameSite=Strict, Secure outside development).
"""

from __future__ import annotations

from typing import Annotated, Final

from fastapi import APIRouter, Body, Request, Response, status

from rota.api.deps import Audit, Auth, Runtime
from rota.api.paths import cookie_path
from rota.api.problems import problem_responses
from rota.api.schemas.security import (
    LoginRequest,
    PasswordChange,
    RefreshRequest,
    TokenOut,
    UserOut,
)
from rota.api.security import (
    ACCESS_COOKIE,
    CSRF_HEADER,
    REFRESH_COOKIE,
    SignedIn,
)
from rota.core.errors import AuthenticationError, PermissionDeniedError
from rota.services.auth import Tokens

router = APIRouter(prefix="/auth", tags=["auth"])

REFRESH_COOKIE_PATH: Final = "/api/v1/auth"


def _secure(runtime: Runtime) -> bool:
    return runtime.settings.cookies_secure  # the dashboard's cookies follow the same rule


def _set_cookies(request: Request, response: Response, tokens: Tokens, runtime: Runtime) -> None:
    """The cookies' paths carry the app's mount prefix (``docs/embedding.md``)."""
    secure = _secure(runtime)
    response.set_cookie(
        ACCESS_COOKIE,
        tokens.access_token,
        max_age=tokens.expires_in,
        path=cookie_path(request),
        httponly=True,
        samesite="strict",
        secure=secure,
    )
    response.set_cookie(
        REFRESH_COOKIE,
        tokens.refresh_token,
        max_age=int(runtime.auth.config.refresh_ttl.total_seconds()),
        path=cookie_path(request, REFRESH_COOKIE_PATH),
        httponly=True,
        samesite="strict",
        secure=secure,
    )


def _clear_cookies(request: Request, response: Response, runtime: Runtime) -> None:
    secure = _secure(runtime)
    response.delete_cookie(
        ACCESS_COOKIE, path=cookie_path(request), httponly=True, samesite="strict", secure=secure
    )
    response.delete_cookie(
        REFRESH_COOKIE,
        path=cookie_path(request, REFRESH_COOKIE_PATH),
        httponly=True,
        samesite="strict",
        secure=secure,
    )


def _token_out(tokens: Tokens) -> TokenOut:
    return TokenOut(
        access_token=tokens.access_token,
        refresh_token=tokens.refresh_token,
        expires_in=tokens.expires_in,
    )


def _client(request: Request) -> str | None:
    """The caller's address, as the server sees it (from X-Forwarded-For only when the peer
    is one of ``api.trusted_proxies``)."""
    return request.client.host if request.client else None


@router.post(
    "/login",
    response_model=TokenOut,
    responses=problem_responses(401, 413, 422, 429, 503),
    summary="Sign in with a username and password",
    description="Returns an access token (a JWT, 15 minutes at most) and a single-use "
    "refresh token. Wrong credentials: 401 (the same whether or not the user exists). "
    "After 5 failures in a row (ROTA_AUTH__MAX_FAILED_LOGINS) the name is locked for 15 "
    "minutes: 429 with Retry-After. Too many sign-ins from the caller's address or in all, "
    "or another sign-in of the same name being checked: 429 with Retry-After. The server's "
    "password checks all taken: 503 with Retry-After.",
)
async def login(
    body: LoginRequest, auth: Auth, audit: Audit, runtime: Runtime, request: Request
) -> Response:
    client = {"client": _client(request)}
    try:
        tokens = await auth.login(body.username, body.password, client=client["client"])
    except AuthenticationError as exc:
        actor = body.username.strip().lower()[:100] or "-"
        await audit.record(actor, "login.failed", "user", after={**client, "reason": exc.message})
        raise
    user = tokens.user
    await audit.record(user.username, "login.succeeded", "user", user.id, after=client)
    response = _json(_token_out(tokens))
    _set_cookies(request, response, tokens, runtime)
    return response


def _json(body: TokenOut) -> Response:
    return Response(
        body.model_dump_json(by_alias=True),
        media_type="application/json",
        headers={"Cache-Control": "no-store"},
    )


def _refresh_token(body: RefreshRequest | None, request: Request) -> str:
    if body is not None and body.refresh_token:
        return body.refresh_token
    cookie = request.cookies.get(REFRESH_COOKIE)
    if not cookie:
        raise AuthenticationError('the refresh token is missing: send {"refreshToken": …}')
    if request.headers.get(CSRF_HEADER) != "1":
        raise PermissionDeniedError(f"a refresh by cookie must send the header {CSRF_HEADER}: 1")
    return cookie


@router.post(
    "/refresh",
    response_model=TokenOut,
    responses=problem_responses(401, 403, 413, 422, 429),
    summary="New tokens for a refresh token (which is used up)",
    description="Every refresh token works once: the answer carries its successor. A used "
    "one presented again revokes every token of that login (401). Without a body the "
    "rota_refresh cookie is used (with the header X-Rota-CSRF: 1). Too many refreshes from "
    "the caller's address or in all: 429 with Retry-After.",
)
async def refresh(
    auth: Auth,
    runtime: Runtime,
    request: Request,
    body: Annotated[RefreshRequest | None, Body()] = None,
) -> Response:
    tokens = await auth.refresh(_refresh_token(body, request), client=_client(request))
    response = _json(_token_out(tokens))
    _set_cookies(request, response, tokens, runtime)
    return response


@router.post(
    "/logout",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=problem_responses(413, 422),
    summary="End a login: revoke its refresh tokens",
    description="Revokes the refresh token's family (every token of that login) and clears "
    "the cookies. Access tokens already issued expire on their own (15 minutes at most).",
)
async def logout(
    user: SignedIn,
    auth: Auth,
    audit: Audit,
    runtime: Runtime,
    request: Request,
    body: Annotated[RefreshRequest | None, Body()] = None,
) -> Response:
    token = body.refresh_token if body is not None else None
    token = token or request.cookies.get(REFRESH_COOKIE)
    if token:
        await auth.logout(token)
    await audit.record(user.username, "logout", "user", user.user_id)
    response = Response(status_code=status.HTTP_204_NO_CONTENT)
    _clear_cookies(request, response, runtime)
    return response


@router.get("/me", responses=problem_responses(503), summary="The signed-in user")
async def me(user: SignedIn, auth: Auth) -> UserOut:
    return UserOut.of(await auth.get_user(user.user_id))


@router.put(
    "/password",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=problem_responses(413, 422, 429, 503),
    summary="Change the signed-in user's password",
    description="Needs the current password (a wrong one counts as a failed login). The new "
    "one: at least 12 characters, not the username, not a common password. Ends every "
    "session of the user at once, this one included (access tokens, dashboard sessions and "
    "refresh tokens): sign in again with the new password.",
)
async def change_password(
    user: SignedIn, body: PasswordChange, auth: Auth, audit: Audit
) -> Response:
    await auth.change_password(user, body.current_password, body.new_password)
    await audit.record(user.username, "password.changed", "user", user.user_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
