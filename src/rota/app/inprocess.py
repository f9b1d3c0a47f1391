"""An httpx transport onto an ASGI app of this process, streaming: what
:meth:`rota.app.embed.Rota.client` gives the Python client, so that an app with Rota inside
calls Rota's API without a network hop or a URL of its own.

``httpx.ASGITransport`` collects a whole response body before it returns, so the API's event
stream (on which a run's handle waits for its end) would never return through it. This one
hands the body over as the app sends it; closing the response tells the app the client went
away (``http.disconnect``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

import httpx

Message = MutableMapping[str, Any]
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
AsgiApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_END = object()
CLOSE_WAIT = 5.0
"""Seconds a closed response's app gets to end by itself before it is cancelled."""


class _Body(httpx.AsyncByteStream):
    def __init__(
        self, chunks: asyncio.Queue[object], gone: asyncio.Event, task: asyncio.Task[None]
    ) -> None:
        self._chunks = chunks
        self._gone = gone
        self._task = task

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            chunk = await self._chunks.get()
            if chunk is _END:
                return
            assert isinstance(chunk, bytes)
            yield chunk

    async def aclose(self) -> None:
        self._gone.set()  # the app's receive() now answers http.disconnect
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._task), CLOSE_WAIT)
        if not self._task.done():
            self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


class StreamingASGITransport(httpx.AsyncBaseTransport):
    """Requests to ``app`` as an ASGI server would send them (from ``client``, the address
    the app sees), their responses streamed."""

    def __init__(self, app: AsgiApp, client: tuple[str, int] = ("127.0.0.1", 0)) -> None:
        self._app = app
        self._client = client

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        exchange = _Exchange(await request.aread())
        scope = _scope(request, self._client)
        task = asyncio.create_task(exchange.run(self._app, scope), name="rota-inprocess")
        try:
            status, headers = await exchange.started
        except BaseException:
            await asyncio.gather(task, return_exceptions=True)
            raise
        return httpx.Response(
            status, headers=headers, stream=_Body(exchange.chunks, exchange.gone, task)
        )


def _scope(request: httpx.Request, client: tuple[str, int]) -> Scope:
    url = request.url
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method,
        "headers": [(k.lower(), v) for k, v in request.headers.raw],
        "scheme": url.scheme,
        "path": url.path,
        "raw_path": url.raw_path.split(b"?")[0],
        "query_string": url.query,
        "server": (url.host, url.port or (443 if url.scheme == "https" else 80)),
        "client": client,
        "root_path": "",
    }


class _Exchange:
    """One request's ``receive`` and ``send``: the body once, then a disconnect when the
    response is closed; the response's start, then its body in chunks."""

    def __init__(self, body: bytes) -> None:
        self._body: bytes | None = body
        self.chunks: asyncio.Queue[object] = asyncio.Queue()
        self.started: asyncio.Future[tuple[int, list[tuple[bytes, bytes]]]] = (
            asyncio.get_running_loop().create_future()
        )
        self.gone = asyncio.Event()

    async def receive(self) -> Message:
        if self._body is not None:
            body, self._body = self._body, None
            return {"type": "http.request", "body": body, "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started.set_result((message["status"], list(message.get("headers", []))))
        elif message["type"] == "http.response.body":
            if message.get("body"):
                await self.chunks.put(bytes(message["body"]))
            if not message.get("more_body", False):
                await self.chunks.put(_END)

    async def run(self, app: AsgiApp, scope: Scope) -> None:
        try:
            await app(scope, self.receive, self.send)
        except Exception as exc:
            if not self.started.done():
                self.started.set_exception(exc)  # the caller's request raises it
                return
            raise
        finally:
            await self.chunks.put(_END)
            if not self.started.done():
                self.started.set_exception(RuntimeError("the app ended without a response"))
