"""Password hashing off the event loop, in a small pool of its own with a bounded queue.

argon2id is slow and memory-hard on purpose (about 0.1 s and 64 MiB per hash with the
defaults). Run on the shared default thread pool, a flood of sign-ins would take every thread
and hundreds of MiB, and queue without bound. Here at most ``threads`` hashes run at once and
at most ``queue`` wait; past that, :meth:`HashingPool.ticket` refuses at once
(:class:`OverloadedError`, to be answered 503 with Retry-After) before any work is done. The
hashing threads run at a lower CPU priority (Linux), so the event loop is not starved.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import Final, TypeVar

from pwdlib import PasswordHash

from rota.core.errors import OverloadedError

T = TypeVar("T")
RETRY_AFTER_SECONDS: Final = 1
NICENESS: Final = 10
"""How much lower the hashing threads' CPU priority is than the event loop's (Linux): under a
flood of sign-ins, the API's other calls get the CPU first."""


def _lower_priority() -> None:
    """A hashing thread's initializer: lower its own scheduling priority (Linux schedules
    threads one by one; elsewhere, or if not allowed, nothing changes)."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICENESS)


class HashingPool:
    """``threads`` hashing threads and room for ``queue`` more waiting checks."""

    def __init__(self, hasher: PasswordHash, *, threads: int = 1, queue: int = 8) -> None:
        if threads < 1 or queue < 0:
            raise ValueError("a hashing pool needs threads >= 1 and queue >= 0")
        self.hasher = hasher
        self.threads = threads
        self.capacity = threads + queue
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self.in_flight = 0
        """Checks admitted and not finished (running or waiting)."""
        self.refused = 0
        """Checks refused so far because the pool was full."""

    def ticket(self) -> Ticket:
        """Room for one hash or verification (a context manager), or
        :class:`OverloadedError` when ``threads + queue`` are taken."""
        with self._lock:
            full = self.in_flight >= self.capacity
            if full:
                self.refused += 1
            else:
                self.in_flight += 1
        if full:
            raise OverloadedError(
                "the server is busy checking passwords: try again in a second",
                retry_after=RETRY_AFTER_SECONDS,
            )
        return Ticket(self)

    async def hash(self, password: str) -> str:
        with self.ticket() as ticket:
            return await ticket.run(self.hasher.hash, password)

    async def verify_and_update(self, password: str, password_hash: str) -> tuple[bool, str | None]:
        with self.ticket() as ticket:
            return await ticket.run(self.hasher.verify_and_update, password, password_hash)

    def _release(self, _future: object = None) -> None:
        """Give a room back (also from a hashing thread, when its check is done)."""
        with self._lock:
            self.in_flight -= 1

    def _submit(self, fn: Callable[..., T], *args: object) -> Future[T]:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                self.threads, thread_name_prefix="rota-hash", initializer=_lower_priority
            )
        return self._executor.submit(fn, *args)

    def close(self, *, wait: bool = False) -> None:
        """Stop the threads (checks not started are dropped); ``wait``: until they end. A
        later check starts new ones."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=wait, cancel_futures=True)


class Ticket:
    """One admitted check: run it once with :meth:`run`; leaving the ``with`` block without
    running it gives its room back. The room of a check that runs is given back when its
    thread finishes (not when its caller stops waiting)."""

    def __init__(self, pool: HashingPool) -> None:
        self._pool = pool
        self._held = True

    def __enter__(self) -> Ticket:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._held:
            self._held = False
            self._pool._release()

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        if not self._held:
            raise RuntimeError("a ticket runs one check")
        self._held = False
        future = self._pool._submit(fn, *args)
        future.add_done_callback(self._pool._release)
        return await asyncio.wrap_future(future)
