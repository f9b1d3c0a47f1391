"""A TCP fault proxy for the fault tests: it forwards ``127.0.0.1:<port>`` to a target and can
break the connections passing through it, in a thread (and event loop) of its own so that the
synchronous tests drive it directly.

Faults (each until :meth:`FaultProxy.heal`):

* **blackhole** — every open connection, and every one accepted meanwhile, has its bytes read
  and dropped in both directions; nothing is closed. A connection blackholed once stays so
  (its byte stream has a hole now): only its peers' timeouts (AMQP heartbeats) end it.
* **reset** — every open connection is reset (RST, ``SO_LINGER`` 0) and so is every new one.
* **latency** — every chunk is delivered ``seconds`` late, in order, in both directions.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Coroutine
from typing import Any

_CHUNK = 65536
_RST = struct.pack("ii", 1, 0)
"""``SO_LINGER`` on with a timeout of 0: ``close()`` sends RST instead of FIN."""


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RST)
    writer.transport.abort()


class _Link:
    """One proxied connection: the client side and the upstream side."""

    def __init__(self, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter) -> None:
        self.client = client
        self.upstream = upstream
        self.blackholed = False
        self.tasks: list[asyncio.Task[None]] = []

    def reset(self) -> None:
        _reset(self.client)
        _reset(self.upstream)
        for task in self.tasks:
            task.cancel()


class FaultProxy:
    """``with FaultProxy(port) as proxy:`` forwards ``127.0.0.1:proxy.port`` to
    ``host:port``; :meth:`blackhole`, :meth:`reset`, :meth:`latency` break it, :meth:`heal`
    mends it for new connections."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.mode = "ok"
        self.delay = 0.0
        self.accepted = 0
        """Connections accepted so far."""
        self.resets = 0
        """Connections reset so far."""
        self._links: set[_Link] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy")
        self._server: asyncio.Server | None = None

    # --- control (any thread) ---------------------------------------------------------------

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        self._call(self._listen())
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def blackhole(self) -> None:
        self._call(self._set("blackhole"))

    def reset(self) -> None:
        self._call(self._set("reset"))

    def latency(self, seconds: float) -> None:
        self.delay = seconds
        self._call(self._set("latency"))

    def heal(self) -> None:
        self.delay = 0.0
        self._call(self._set("ok"))

    @property
    def open_links(self) -> int:
        """Connections open through the proxy (blackholed ones included)."""
        return len(self._links)

    def _call(self, coro: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    # --- the proxy (its loop) ----------------------------------------------------------------

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in list(self._links):
            link.reset()
        self._links.clear()

    async def _set(self, mode: str) -> None:
        self.mode = mode
        if mode == "blackhole":
            for link in self._links:
                link.blackholed = True
        elif mode == "reset":
            for link in list(self._links):
                self._drop(link)

    def _drop(self, link: _Link) -> None:
        self.resets += 1
        self._links.discard(link)
        link.reset()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.mode == "reset":
            self.resets += 1
            _reset(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _reset(writer)
            return
        link = _Link(writer, up_writer)
        link.blackholed = self.mode == "blackhole"
        self._links.add(link)
        link.tasks = [
            asyncio.create_task(self._pipe(link, reader, up_writer)),
            asyncio.create_task(self._pipe(link, up_reader, writer)),
        ]
        await asyncio.gather(*link.tasks, return_exceptions=True)
        if link in self._links:  # one side closed: close the other (FIN, not RST)
            self._links.discard(link)
            for side in (writer, up_writer):
                side.close()

    async def _pipe(
        self, link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Copy one direction; with latency, chunks wait their due time in a queue (order
        kept) while reading goes on."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        sender = asyncio.create_task(self._send(queue, writer))
        try:
            while data := await reader.read(_CHUNK):
                if link.blackholed:
                    continue
                queue.put_nowait((loop.time() + self.delay, data))
            queue.put_nowait((0.0, b""))
            await sender
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            sender.cancel()

    async def _send(
        self, queue: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter
    ) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due, data = await queue.get()
            if not data:
                with contextlib.suppress(OSError):
                    writer.write_eof()
                return
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                writer.write(data)
                await writer.drain()
            except OSError:  # the peer is gone: the reading side ends too
                return
