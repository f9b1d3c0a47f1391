"""The benches' sign-in: a bearer token got from ``POST /api/v1/auth/login`` on the first
request and got again when the server answers 401 (a token expires after
``auth.access_token_minutes``, 15 by default, and a bench of ten million jobs outlasts it)."""

from __future__ import annotations

from collections.abc import Generator

import httpx

LOGIN = "/api/v1/auth/login"


class SignIn(httpx.Auth):
    """Bearer auth for an ``httpx`` client that signs in as ``username`` before its first
    request and again (once per request) after a 401; the request is then sent again."""

    requires_response_body = True  # the login's answer is read within the flow

    def __init__(self, username: str, password: str) -> None:
        self._credentials = {"username": username, "password": password}
        self._token: str | None = None
        self.sign_ins = 0

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if self._token is None:
            yield from self._sign_in(request)
        request.headers["Authorization"] = f"Bearer {self._token}"
        response = yield request
        if response.status_code == 401:
            yield from self._sign_in(request)
            request.headers["Authorization"] = f"Bearer {self._token}"
            yield request

    def _sign_in(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        url = request.url.copy_with(path=LOGIN, query=None)
        response = yield httpx.Request("POST", url, json=self._credentials)
        response.raise_for_status()
        self._token = str(response.json()["accessToken"])
        self.sign_ins += 1
