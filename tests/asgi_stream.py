"""Streaming responses (server-sent events) from an ASGI app, in process.

``httpx.ASGITransport`` collects the whole body before it returns a response, so an endless
event stream never returns. :class:`StreamingASGITransport` hands the body over as the app
sends it; closing the response tells the app the client went away (``http.disconnect``).
:func:`streaming_client` makes a client on it that sends what the client from
``tests/api_client.py`` sends (its headers: the sign-in, once there is one).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

import httpx
from starlette.types import ASGIApp

_END = object()


class _Body(httpx.AsyncByteStream):
    def __init__(self, chunks: asyncio.Queue[Any], done: asyncio.Event, task: asyncio.Task[None]):
        self._chunks = chunks
        self._done = done
        self._task = task

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            chunk = await self._chunks.get()
            if chunk is _END:
                return
            yield chunk

    async def aclose(self) -> None:
        self._done.set()  # the app's receive() now answers http.disconnect
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._task), 5)
        if not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


class StreamingASGITransport(httpx.AsyncBaseTransport):
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": request.method,
            "headers": [(k.lower(), v) for k, v in request.headers.raw],
            "scheme": request.url.scheme,
            "path": request.url.path,
            "raw_path": request.url.raw_path.split(b"?")[0],
            "query_string": request.url.query,
            "server": (request.url.host, request.url.port or 80),
            "client": ("127.0.0.1", 123),
            "root_path": "",
        }
        chunks: asyncio.Queue[Any] = asyncio.Queue()
        started: asyncio.Future[tuple[int, list[tuple[bytes, bytes]]]] = (
            asyncio.get_running_loop().create_future()
        )
        disconnected = asyncio.Event()
        sent_body = False

        async def receive() -> dict[str, Any]:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": body, "more_body": False}
            await disconnected.wait()
            return {"type": "http.disconnect"}

        async def send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                started.set_result((message["status"], list(message.get("headers", []))))
            elif message["type"] == "http.response.body":
                if message.get("body"):
                    await chunks.put(message["body"])
                if not message.get("more_body", False):
                    await chunks.put(_END)

        async def run() -> None:
            try:
                await self.app(scope, receive, send)
            finally:
                await chunks.put(_END)
                if not started.done():
                    started.set_exception(RuntimeError("the app sent no response"))

        task = asyncio.create_task(run())
        status, headers = await started
        return httpx.Response(status, headers=headers, stream=_Body(chunks, disconnected, task))


@asynccontextmanager
async def streaming_client(
    app: ASGIApp, like: httpx.AsyncClient
) -> AsyncIterator[httpx.AsyncClient]:
    """A client on ``app`` that streams, with the base URL and headers of ``like``."""
    transport = StreamingASGITransport(app)
    async with httpx.AsyncClient(
        transport=transport, base_url=like.base_url, headers=like.headers
    ) as http:
        yield http
