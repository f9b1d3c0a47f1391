"""Where the app is mounted: the ASGI ``root_path``.

Rota's app may be served at the root of a host (``rota server``) or mounted under a prefix in
another ASGI app (``/rota``, see ``docs/embedding.md``), or behind a proxy that strips one
(uvicorn's ``--root-path``). Every URL the API and the dashboard hand to a client (links, form
actions, redirects, ``Location`` headers, cookie paths, the event stream's address) is built
from the routes' own paths with this prefix in front.
"""

from __future__ import annotations

from starlette.requests import HTTPConnection


def root_path(request: HTTPConnection) -> str:
    """The prefix the app is mounted at, without a trailing slash (``""`` at the root)."""
    root: str = request.scope.get("root_path", "")
    return root.rstrip("/")


def app_url(request: HTTPConnection, path: str) -> str:
    """``path`` (one of the app's own, starting with ``/``) as the browser must ask for it."""
    return root_path(request) + path


def cookie_path(request: HTTPConnection, path: str = "/") -> str:
    """A cookie's path for ``path`` of this app: the mount prefix in front, so that a cookie
    of a Rota mounted at ``/rota`` is not sent to the rest of the site."""
    return app_url(request, path) if path != "/" else (root_path(request) or "/")
