"""Rota inside your app: the scheduler, the REST API and the dashboard of ``rota server`` run
by another ASGI application (FastAPI, Starlette, Django…), started and stopped by its
lifespan, served under the prefix it is mounted at (``docs/embedding.md``).

::

    import rota
    from fastapi import FastAPI

    scheduler = rota.Rota(jobs=["myapp.jobs"])
    app = FastAPI(lifespan=scheduler.lifespan)
    app.mount("/rota", scheduler.asgi())
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, MutableMapping, Sequence
from pathlib import Path
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any, Self

from rota.app.settings import Settings
from rota.core.errors import ConfigurationError

if TYPE_CHECKING:
    from fastapi import FastAPI

    from rota.app.runtime import Runtime
    from rota.client import Client
    from rota.stores.files import StoreOwnerLock

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

NOT_RUNNING = (
    "Rota is not running: start it with the lifespan of the app that mounts it "
    "(FastAPI(lifespan=rota_app.lifespan), or `async with rota_app:`)"
)


class Rota:
    """One Rota server (scheduler, REST API, dashboard) run by your own application.

    ``settings``: Rota's settings (``rota.Settings``); by default read from the environment
    (``ROTA_…``) and ``rota.toml`` like ``rota server``. Without ``ROTA_REDIS_URL`` /
    ``ROTA_AMQP_URL`` it runs the embedded mode (SQLite in the data dir, and the jobs of
    ``jobs`` run in this process); with them, the distributed mode (your workers run apart:
    ``rota worker``, or :meth:`run_worker`).

    ``jobs``: the modules holding your ``@rota.job`` handlers (dotted names or module
    objects), as ``rota dev --jobs`` / ``rota worker`` take them. ``builtin``: built-in
    workers to run too (``"http"``, ``"sql"``…). ``dashboard``: serve the dashboard beside
    the API (on by default).

    Life cycle: :meth:`start` / :meth:`stop`, ``async with``, or :meth:`lifespan` for
    ``FastAPI(lifespan=…)`` / ``Starlette(lifespan=…)``. The ASGI app of :meth:`asgi` answers
    503 until Rota has started.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        jobs: Iterable[str | ModuleType] = (),
        builtin: Sequence[str] = (),
        dashboard: bool = True,
    ) -> None:
        self.settings = settings if settings is not None else Settings()
        self._modules = [m.__name__ if isinstance(m, ModuleType) else m for m in jobs]
        self._builtin = tuple(builtin)
        self._dashboard = dashboard
        self._runtime: Runtime | None = None
        self._app: FastAPI | None = None
        self._lock: StoreOwnerLock | None = None
        self._asgi: _RotaAsgi | None = None
        self._starting = asyncio.Lock()

    # --- life cycle -------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._runtime is not None

    @property
    def runtime(self) -> Runtime:
        """The running parts (services, store…): for advanced use; raises before :meth:`start`."""
        if self._runtime is None:
            raise ConfigurationError(NOT_RUNNING)
        return self._runtime

    async def start(self) -> None:
        """Take the store (SQLite: one process at a time), bring its schema up to date
        (SQLite, or ``environment = "development"``; PostgreSQL otherwise needs
        ``rota migrate``), and start the scheduler's services (and, in the embedded mode, the
        workers of ``jobs``). Starting a started Rota does nothing."""
        async with self._starting:
            if self._runtime is not None:
                return
            from rota.app.adapters import store_owner_lock

            lock = store_owner_lock(self.settings.effective_database_url)
            if lock is not None:
                lock.acquire()
            try:
                runtime = await self._prepare()
                app = self._build_app(runtime)
                await runtime.start()
            except BaseException:
                if lock is not None:
                    lock.release()
                raise
            self._lock, self._runtime, self._app = lock, runtime, app
            log.info("rota started inside the app", extra={"instance_id": runtime.instance_id})

    async def _prepare(self) -> Runtime:
        from rota.app.server import prepare

        return await prepare(self.settings, self._modules, builtin=self._builtin)

    def _build_app(self, runtime: Runtime) -> FastAPI:
        from rota.api.app import create_app

        return create_app(runtime, dashboard=self._dashboard)

    async def stop(self, *, grace: float = 10.0) -> None:
        """Stop gracefully: no new dispatch, running jobs finish (up to ``grace`` seconds),
        their reports are stored, leases released. Stopping a stopped Rota does nothing."""
        async with self._starting:
            runtime, self._runtime, self._app = self._runtime, None, None
            if runtime is None:
                return
            try:
                await runtime.stop(grace=grace)
            finally:
                lock, self._lock = self._lock, None
                if lock is not None:
                    lock.release()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @contextlib.asynccontextmanager
    async def lifespan(self, app: object = None) -> AsyncIterator[None]:
        """For ``FastAPI(lifespan=rota_app.lifespan)`` (``app`` is the host app, unused):
        Rota runs while the host app does. With a lifespan of your own, enter
        ``async with rota_app:`` in it instead."""
        async with self:
            yield

    # --- serving ----------------------------------------------------------------------------

    def asgi(self) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
        """The REST API (``/api/v1``, ``/docs``, ``/openapi.json``, ``/metrics``) and the
        dashboard as one ASGI app, to mount under any prefix (``app.mount("/rota", …)``);
        every URL it hands out carries the prefix (the ASGI ``root_path``). Served alone
        (``uvicorn module:app`` on it), it starts and stops Rota with the server's lifespan.
        Always the same app for this Rota."""
        if self._asgi is None:
            self._asgi = _RotaAsgi(self)
        return self._asgi

    def client(
        self,
        *,
        api_key: str | None = None,
        token: str | None = None,
        username: str | None = None,
        password: str | None = None,
        timeout: float = 30.0,
    ) -> Client:
        """A :class:`rota.Client` on this Rota, in this process: its calls go straight to
        :meth:`asgi` (no network, no URL to know), the event stream its handles wait on
        included. Sign it in as any client (an API key suits an app). Open it with ``async
        with`` (or close it) like any client; use it while Rota runs."""
        from rota.app.inprocess import StreamingASGITransport
        from rota.client import Client

        return Client(
            "http://rota.internal",
            api_key=api_key,
            token=token,
            username=username,
            password=password,
            timeout=timeout,
            transport=StreamingASGITransport(self.asgi()),
        )

    # --- a worker process (distributed mode) ------------------------------------------------

    async def run_worker(
        self,
        worker_id: str | None = None,
        *,
        concurrency: int | None = None,
        grace: float = 30.0,
        stop: asyncio.Event | None = None,
        state_dir: Path | None = None,
    ) -> None:
        """Run the handlers of ``jobs`` as a worker of the group ``worker_id`` (default: the
        ``worker.group`` setting, ``default``) in this process, as ``rota worker`` does, until
        SIGTERM/SIGINT (or ``stop`` is set), then stop gracefully. For a worker command of
        your app (Django: ``manage.py rota_worker``); ``concurrency`` defaults to the
        ``worker.concurrency`` setting, ``state_dir`` to ``rota worker``'s.

        Needs the distributed mode (``ROTA_REDIS_URL`` and ``ROTA_AMQP_URL``): the embedded
        mode runs its jobs inside the server (:meth:`start`)."""
        from rota.app.worker_process import run_worker

        await run_worker(
            self.settings,
            self._modules,
            worker_id=worker_id or self.settings.worker.group,
            concurrency=concurrency or self.settings.worker.concurrency,
            grace=grace,
            stop=stop,
            state_dir=state_dir,
            builtin=self._builtin,
        )


class _RotaAsgi:
    """The ASGI app of a :class:`Rota`: the API and dashboard once it runs, 503 before."""

    def __init__(self, owner: Rota) -> None:
        self._owner = owner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        app = self._owner._app
        if app is not None:
            await app(scope, receive, send)
        elif scope["type"] == "http":
            await _not_running(send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1013})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        """Served alone: the server's start and stop are Rota's."""
        while True:
            message = await receive()
            kind = message["type"]
            try:
                if kind == "lifespan.startup":
                    await self._owner.start()
                elif kind == "lifespan.shutdown":
                    await self._owner.stop()
            except Exception as exc:
                await send({"type": f"{kind}.failed", "message": str(exc)})
                if kind == "lifespan.startup":
                    continue
                return
            await send({"type": f"{kind}.complete"})
            if kind == "lifespan.shutdown":
                return


async def _not_running(send: Send) -> None:
    body = json.dumps(
        {"type": "about:blank", "title": "Service Unavailable", "status": 503,
         "detail": NOT_RUNNING}
    ).encode()  # fmt: skip
    headers = [
        (b"content-type", b"application/problem+json"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", b"5"),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})
