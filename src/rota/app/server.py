"""Run a runtime with the HTTP API under uvicorn, in one event loop (``rota dev`` / ``server``)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
from collections.abc import Iterator, Sequence
from typing import Any

import uvicorn
from rich.console import Console
from rich.panel import Panel

from rota.app.runtime import Runtime, tune_process
from rota.app.settings import Settings
from rota.app.startup import redact_url
from rota.app.wiring import build_runtime
from rota.core.errors import ConfigurationError
from rota.observability.tracing import Tracing, tracing_from_env
from rota.worker.metrics_server import MetricsServer

log = logging.getLogger(__name__)


async def prepare(
    settings: Settings,
    modules: Sequence[str],
    tracing: Tracing | None = None,
    builtin: Sequence[str] = (),
) -> Runtime:
    """Migrate the store (embedded/dev) and wire the runtime with the given job modules and
    built-in workers."""
    from rota.app.adapters import upgrade_schema
    from rota.app.builtins import load_registry

    url = settings.effective_database_url
    # SQLite: the migration creates the file (0600) and its directory (0700)
    if url.startswith("sqlite") or settings.environment == "development":
        await upgrade_schema(url)
    registry = load_registry(settings, modules, builtin) if modules or builtin else None
    return build_runtime(settings, registry, tracing)


async def serve(
    settings: Settings,
    modules: Sequence[str],
    *,
    demo: bool,
    console: Console,
    dev_admin: bool = False,
    builtin: Sequence[str] = (),
) -> None:
    """``dev_admin`` (``rota dev``): with no Admin yet, create ``admin`` with a generated
    password and print the login.

    Before the store is migrated or anything printed: a SQLite store is taken for this
    process (its owner lock, held until the end; another process holding it ends the start
    with an error naming that process), and the listening address is bound (a taken port
    ends the start with an error naming it). Both are a ``ConfigurationError``: exit code 2
    in the CLI."""
    from rota.app.adapters import store_owner_lock

    lock = store_owner_lock(settings.effective_database_url)
    try:
        # A store in use is named first (a second `rota dev` on the same port too); a data
        # dir that does not exist yet is created only once the port is bound.
        taken = lock is not None and lock.acquire(create=False)
        sockets = bind_listen_sockets(settings.api.host, settings.api.port)
        try:
            if lock is not None and not taken:
                lock.acquire()
            await _serve(settings, modules, sockets, demo, console, dev_admin, builtin)
        finally:
            for sock in sockets:
                sock.close()
    finally:
        if lock is not None:
            lock.release()


async def _serve(
    settings: Settings,
    modules: Sequence[str],
    sockets: list[socket.socket],
    demo: bool,
    console: Console,
    dev_admin: bool,
    builtin: Sequence[str],
) -> None:
    from rota.api.app import create_app
    from rota.api.vendor import missing_warning

    tracing = tracing_from_env("rota-server")
    runtime = await prepare(settings, modules, tracing, builtin)
    await runtime.start()
    tune_process()
    port = sockets[0].getsockname()[1]  # the one chosen, with --port 0
    url = f"http://{_url_host(settings.api.host)}:{port}"
    scrape: MetricsServer | None = None
    try:
        scrape = await _metrics_port(settings, runtime, console)
        if dev_admin:
            await ensure_dev_admin(runtime, console, url)
        if demo:
            from rota.demo import seed

            created = await seed(runtime.jobs)
            if created:
                console.print(f"[green]created {created} demo jobs[/green]")
        app = create_app(runtime)
        lacking = missing_warning()
        if lacking is not None:  # a package built without its front-end files
            log.warning("%s", lacking)
        server = _Server(http_config(app, settings))
        console.print(
            f"[bold]Rota[/bold] is running: dashboard {url}/  API {url}/api/v1  docs {url}/docs"
        )
        console.print(f"store: {redact_url(settings.effective_database_url)}")
        await server.serve(sockets=sockets)
    finally:
        if scrape is not None:
            await scrape.close()
        with contextlib.suppress(asyncio.CancelledError):
            await runtime.stop()
        tracing.shutdown()
        console.print("Rota stopped.")


async def _metrics_port(
    settings: Settings, runtime: Runtime, console: Console
) -> MetricsServer | None:
    """``GET /metrics`` on a port of its own (``ROTA_METRICS__PORT``), started, or ``None``
    when it is served on the API's port."""
    ms = settings.metrics
    if ms.port is None:
        return None
    scrape = MetricsServer(
        runtime.metrics,
        None,
        host=ms.host,
        port=ms.port,
        token=settings.metrics_token,
        refresh=runtime.refresh_metrics,
        setting="ROTA_METRICS__PORT",
    )
    await scrape.start()
    console.print(f"metrics: http://{_url_host(ms.host)}:{scrape.port}/metrics")
    return scrape


def bind_listen_sockets(host: str, port: int) -> list[socket.socket]:
    """Sockets bound to every address of ``host`` on ``port``, as uvicorn would bind them (address
    reuse; an IPv6 socket for IPv6 only), not listening yet: uvicorn listens on them once the
    runtime runs. A taken port, a port that needs privileges or an address that is not this
    machine's: a :class:`ConfigurationError` saying which and how to choose another."""
    try:
        found = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise ConfigurationError(
            f"cannot listen on {host!r}: {exc.strerror}; choose the interface with --host "
            "or ROTA_API__HOST"
        ) from None
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _name, address in dict.fromkeys(found):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.set_inheritable(True)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        raise ConfigurationError(_bind_error(host, port, exc)) from None
    return sockets


def _bind_error(host: str, port: int, exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return (
            f"port {port} on {host} is already in use (another Rota or another program "
            f"listens there): choose another port with --port (e.g. --port {port + 1}) "
            "or ROTA_API__PORT, or stop what uses it"
        )
    if exc.errno == errno.EACCES:
        return (
            f"no permission to listen on port {port} on {host} (ports below 1024 need "
            "privileges): choose another port with --port or ROTA_API__PORT"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return (
            f"cannot listen on {host}: not an address of this machine; choose the interface "
            "with --host or ROTA_API__HOST"
        )
    return f"cannot listen on {host} port {port}: {exc.strerror or exc}"


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def http_config(app: Any, settings: Settings) -> uvicorn.Config:
    """uvicorn's settings: the address, whose ``X-Forwarded-For`` / ``-Proto`` it believes:
    only ``api.trusted_proxies`` (none by default; uvicorn's own default would be the
    loopback address, or ``FORWARDED_ALLOW_IPS``), and the path a proxy serves it under
    (``api.root_path``)."""
    proxies = [p.strip() for p in settings.api.trusted_proxies.split(",") if p.strip()]
    return uvicorn.Config(
        app,
        host=settings.api.host,
        port=settings.api.port,
        log_config=None,
        lifespan="off",
        proxy_headers=bool(proxies),
        forwarded_allow_ips=proxies,
        root_path=settings.api.root_path,
    )


DEV_ADMIN = "admin"


async def ensure_dev_admin(runtime: Runtime, console: Console, url: str) -> None:
    """The first Admin of a development data dir, printed once; later starts say it exists."""
    from rota.services.auth import generate_password

    auth = runtime.auth
    data_dir = runtime.settings.data_dir
    if await auth.has_admin():
        console.print(
            f"sign in at {url}/api/v1/auth/login as an Admin of this data dir ({data_dir}); "
            f"forgot the password? [bold]rota user password NAME --data-dir {data_dir}[/bold]"
        )
        return
    password = generate_password()
    user = await auth.ensure_admin(DEV_ADMIN, password)
    if user is None:  # another process made one meanwhile
        return
    body = (
        f"URL:      {url}\n"
        f"username: [bold]{user.username}[/bold]\n"
        f"password: [bold]{password}[/bold]\n\n"
        "Shown once: it is stored only as a hash. Change it with\n"
        "PUT /api/v1/auth/password, or reset it with\n"
        f"rota user password {user.username} --data-dir {data_dir}"
    )
    panel = Panel(body, title="Rota admin login (development)", border_style="green")
    console.print(panel, soft_wrap=False)


class _Server(uvicorn.Server):
    """uvicorn re-raises the signal that stopped it once ``serve`` returns, which for SIGTERM
    kills the process before the runtime's graceful stop. Keep the signal for ourselves: the
    runtime then stops gracefully (a second signal takes the default action)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        with super().capture_signals():
            try:
                yield
            finally:
                self.stopped_by = list(self._captured_signals)
                self._captured_signals.clear()
