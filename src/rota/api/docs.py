"""The API's documentation pages: Swagger UI at ``/docs`` and ReDoc at ``/redoc``.

Their scripts, styles and icon are served by Rota itself from the package's vendor folder
(copied from the npm registry's ``swagger-ui-dist`` and ``redoc`` when the package is built,
like the dashboard's libraries: ``rota.api.vendor``): a browser opening the docs fetches
nothing from another host, so they work offline and leak no visit to a CDN. FastAPI's own
``docs_url`` / ``redoc_url`` (CDN links) stay off.
"""

from __future__ import annotations

from html import escape

from fastapi import FastAPI
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.staticfiles import StaticFiles
from starlette.requests import Request
from starlette.responses import HTMLResponse

from rota.api.paths import root_path
from rota.api.vendor import DOCS_FILES, HOW_TO_FIX, missing, vendor_dir

DOCS_PATH = "/docs"
REDOC_PATH = "/redoc"
ASSETS = "/docs/assets"
"""Where the vendor files are served for the docs pages (the dashboard serves the same folder
under ``/static/vendor``; the docs do not depend on the dashboard being mounted)."""
FAVICON = f"{ASSETS}/favicon-32x32.png"
REDIRECT = f"{DOCS_PATH}/oauth2-redirect"

SWAGGER_PARAMETERS = {
    "dom_id": "#swagger-ui",
    "layout": "BaseLayout",
    "deepLinking": True,
    "showExtensions": True,
    "showCommonExtensions": True,
    # Swagger UI would send the document to validator.swagger.io for its badge otherwise.
    "validatorUrl": None,
}

DOCS_HEADERS = {
    # Everything from this server: the pages' own inline start-up scripts, the vendor files,
    # the OpenAPI document; ReDoc renders in a worker made from a blob.
    "Content-Security-Policy": "default-src 'self'; script-src 'self' 'unsafe-inline'; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data:; worker-src 'self' blob:; "
    "font-src 'self' data:; frame-ancestors 'none'; base-uri 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def install_docs(app: FastAPI, openapi_url: str) -> None:
    """``/docs`` (with its OAuth2 redirect page), ``/redoc`` and their assets on ``app``; in a
    package built without the assets, pages that say so (503)."""
    lacking = missing(DOCS_FILES)
    if lacking:
        _install_missing(app, openapi_url, lacking)
        return
    app.mount(ASSETS, StaticFiles(directory=vendor_dir()), name="docs-assets")

    @app.get(DOCS_PATH, include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = root_path(request)  # the pages' URLs carry the app's mount prefix
        page = get_swagger_ui_html(
            openapi_url=root + openapi_url,
            title=f"{app.title} API",
            swagger_js_url=f"{root}{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{FAVICON}",
            oauth2_redirect_url=f"{root}{REDIRECT}",
            swagger_ui_parameters=SWAGGER_PARAMETERS,
        )
        page.headers.update(DOCS_HEADERS)
        return page

    @app.get(REDIRECT, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get(REDOC_PATH, include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = root_path(request)
        page = get_redoc_html(
            openapi_url=root + openapi_url,
            title=f"{app.title} API",
            redoc_js_url=f"{root}{ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{FAVICON}",
            with_google_fonts=False,
        )
        page.headers.update(DOCS_HEADERS)
        return page


def _install_missing(app: FastAPI, openapi_url: str, lacking: list[str]) -> None:
    """``/docs`` and ``/redoc`` in a package built without their files: 503, naming them."""

    async def unavailable(request: Request) -> HTMLResponse:
        described = escape(root_path(request) + openapi_url)
        page = (
            "<!doctype html><html lang='en'><head><meta charset='utf-8'><title>API docs missing"
            "</title></head><body><h1>The API docs cannot be shown</h1><p>This installation of "
            f"Rota lacks their front-end files ({escape(', '.join(lacking))}): "
            f"{escape(HOW_TO_FIX)}.</p><p>The API's description is served all the same: "
            f"<a href='{described}'>{described}</a>.</p></body></html>"
        )
        return HTMLResponse(page, status_code=503, headers=DOCS_HEADERS)

    for path in (DOCS_PATH, REDOC_PATH):
        app.add_api_route(path, unavailable, include_in_schema=False)
