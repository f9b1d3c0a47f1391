"""The dashboard mounted on the API's app: templates, static files, pages and the login."""

from __future__ import annotations

from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import FastAPI, Request
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from markupsafe import Markup
from starlette.responses import RedirectResponse, Response

from rota.api.paths import app_url, root_path
from rota.api.schemas.common import status_name
from rota.api.vendor import DASHBOARD_FILES, HOW_TO_FIX, missing
from rota.core.intervals import format_duration
from rota.dashboard import audit, graphs, lists, overview, pages
from rota.dashboard.display import human, relative
from rota.dashboard.session import SESSION_PATH, LoginRequired

STATIC_PREFIX = "/static"


def _package_dir(name: str) -> Path:
    return Path(str(resources.files("rota.dashboard") / name))


def install_dashboard(app: FastAPI) -> None:
    """Serve the dashboard at ``/`` (pages), ``/ui/…`` (fragments) and ``/static`` on ``app``.

    Every URL a page holds starts with the app's mount prefix (``root`` in the templates, the
    ASGI ``root_path``): the dashboard works at the root of a site and under any prefix."""
    templates = Jinja2Templates(
        directory=_package_dir("templates"), context_processors=[_where_mounted]
    )
    env = templates.env
    env.filters["time"] = render_time
    env.filters["duration"] = render_duration
    env.filters["percent"] = render_percent
    env.filters["every"] = format_duration
    env.globals["status_class"] = status_class
    env.globals["status_name"] = status_name
    env.globals["live_trigger"] = live_trigger
    env.globals["human"] = human
    env.globals["missing_assets"] = missing(DASHBOARD_FILES)  # see _missing_assets.html
    env.globals["assets_how_to_fix"] = HOW_TO_FIX
    app.state.dashboard_templates = templates
    app.mount(STATIC_PREFIX, StaticFiles(directory=_package_dir("static")), name="static")
    app.include_router(overview.router)
    app.include_router(lists.router)
    app.include_router(pages.router)
    app.include_router(audit.router)
    app.include_router(graphs.router)
    app.add_exception_handler(LoginRequired, _to_login)


def _where_mounted(request: Request) -> dict[str, Any]:
    """What every template gets: ``root``, the prefix the app is mounted at (``""`` at the
    root of the site), to put before each of the app's own paths."""
    return {"root": root_path(request)}


async def _to_login(request: Request, exc: Exception) -> Response:
    """No (good) access token: a page goes to ``/ui/session/resume``, which refreshes the
    session or sends the browser to sign in; a request of the page's script (htmx, fetch)
    gets 401, and the script refreshes the session and tries again."""
    if request.headers.get("HX-Request") or "text/html" not in request.headers.get("accept", ""):
        response: Response = Response(status_code=401, headers={"X-Rota-Session": "expired"})
    else:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        query = urlencode({"next": target}, safe="/")
        resume = app_url(request, f"{SESSION_PATH}/resume")
        response = RedirectResponse(f"{resume}?{query}", status_code=303)
    return response  # the refresh cookie stays: resuming needs it


# --- filters --------------------------------------------------------------------------------


def render_time(value: datetime | None, empty: str = "—", fmt: str = "full") -> Markup:
    """``<time>`` in UTC, the full UTC time on hover; the page's script shows it in the
    browser's zone. ``fmt``: ``"full"`` the date and time (ISO order) with how long ago (or how
    soon) beside it, which the script keeps current; ``"plain"`` without; ``"ago"`` only how
    long ago (compact, for tables); ``"iso"`` the date and time without the zone (tables whose
    times are compared); ``"time"`` the time of day with milliseconds."""
    if value is None:
        return Markup(empty)
    utc = value.astimezone(UTC)
    iso = utc.isoformat().replace("+00:00", "Z")
    text = utc.strftime("%Y-%m-%d %H:%M:%S UTC")
    if fmt == "ago":
        return Markup(
            '<time datetime="{0}" title="{1}" data-fmt="ago" class="ago bare" data-ago="{0}">'
            "{2}</time>"
        ).format(iso, text, relative(utc))
    shown_fmt = fmt if fmt in ("time", "iso") else "full"
    shown_text = utc.strftime("%Y-%m-%d %H:%M:%S") if fmt == "iso" else text
    shown = Markup('<time datetime="{0}" title="{1}" data-fmt="{2}">{3}</time>').format(
        iso, text, shown_fmt, shown_text
    )
    if fmt == "full":
        shown += Markup(' <span class="ago" data-ago="{0}">{1}</span>').format(iso, relative(utc))
    return shown


def render_duration(ms: float | None) -> str:
    if ms is None:
        return "—"
    if ms < 1000:
        return f"{ms:.0f} ms"
    seconds = ms / 1000
    if seconds < 120:
        return f"{seconds:.1f} s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 120:
        return f"{minutes} min {sec} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def render_percent(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f} %"


def live_trigger(live: dict[str, Any], events: tuple[str, ...]) -> str:
    """A live region's ``hx-trigger``: the page's own refresh, the events that concern it (when
    the API streams events) and the polling safety net."""
    triggers = ["rota:refresh"]
    if live.get("events"):
        # gap: the stream resumed after events it no longer had, so refresh whatever happened;
        # ready: the stream is in place (again): what changed before it is fetched once
        triggers += [f"sse:{event}" for event in events] + ["sse:gap", "sse:ready"]
    if live.get("poll"):
        triggers.append(f"every {live['poll']}s")
    return ", ".join(triggers)


_STATUS_CLASSES = {
    "Queued": "st-queued",
    "Running": "st-running",
    "Completed": "st-ok",
    "Failed": "st-bad",
    "TimedOut": "st-bad",
    "Unknown": "st-warn",
    "Cancelled": "st-muted",
    "Skipped": "st-muted",
}


def status_class(name: Any) -> str:
    return _STATUS_CLASSES.get(str(name), "st-muted")
