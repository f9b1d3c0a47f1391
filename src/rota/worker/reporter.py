"""The reporter: packs the status and log records of many occurrences and hands them over
together (DESIGN.md §3 step 5, docs/protocol.md §10).

*Handed over* means published (broker-confirmed) or, when publishing fails and the worker has a
:class:`~rota.worker.localstore.LocalStore`, written to its outbox. Deliveries given to
:meth:`Reporter.ack_after_flush` are acknowledged after the flush that hands over the records
added before them (the ack rule), and final reports are recorded as finalized attempts in the
same local transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import msgspec

from rota.core.errors import ValidationError
from rota.core.models import LogRecord, OccurrenceStatus, StatusRecord
from rota.core.ports import Broker, Delivery
from rota.core.wire import (
    decode_log_records,
    decode_status_records,
    encode_log_records,
    encode_status_records,
)
from rota.worker.localstore import LOGS, STATUS, LocalStore, OutboxEntry, OutboxKind

__all__ = ["Reporter"]

log = logging.getLogger(__name__)

S = OccurrenceStatus

MAX_BACKOFF = 5.0
"""Longest wait between publish attempts after failures."""
_REPLAY_ROWS = 200
"""Outbox messages read per replay round."""
_REPLAY_RECORDS = 1000
"""Most records republished in one message when replaying the outbox."""


class Reporter:
    """Packs the status and log records of many occurrences and publishes them together: one
    ``publish_status`` and one ``publish_logs`` per flush, every ``flush_interval`` seconds or
    as soon as ``max_pending`` records wait or ``max_acks`` deliveries wait for their ack (the
    broker's prefetch window stays open).

    A Running record followed, before the flush, by the final status of the same attempt is
    dropped (the tracker accepts Queued -> final). Records keep their order per occurrence.

    When a publish fails (raises, or takes longer than ``publish_timeout``): with a ``store``,
    the records go to its outbox and are replayed, oldest first and before anything newer, once
    publishing works again (after a restart too); without one, they are kept in memory and sent
    first on the next flush. Publishing is retried after ``flush_interval × 2^failures`` (at
    most 5 s); meanwhile flushes go straight to the outbox.

    ``add_status`` and ``ack_after_flush`` must be called on the loop; ``add_log`` from any
    thread.
    """

    def __init__(
        self,
        broker: Broker,
        *,
        flush_interval: float,
        max_pending: int = 500,
        max_acks: int = 500,
        store: LocalStore | None = None,
        publish_timeout: float = 30.0,
    ) -> None:
        if flush_interval <= 0:
            raise ValueError("flush_interval must be > 0")
        self._broker = broker
        self._store = store
        self._interval = flush_interval
        self._max_pending = max_pending
        self._max_acks = max(max_acks, 1)
        self._publish_timeout = publish_timeout
        self._status: list[StatusRecord | None] = []
        self._running_at: dict[UUID, int] = {}
        """occurrence id -> index in ``_status`` of its pending Running record."""
        self._logs: list[LogRecord] = []
        self._log_lock = threading.Lock()
        self._acks: list[Delivery] = []
        self._wake = asyncio.Event()
        self._flush_lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._closing = False
        self._failures = 0
        self._retry_at = 0.0
        """Loop-clock time before which no publish is tried (a store's outbox takes records)."""
        self._outbox_entries = -1
        """Messages in the store's outbox (-1: not counted yet)."""
        self.outboxed = 0
        """Records written to the outbox since start."""
        self.replayed = 0
        """Outbox records published since start."""

    @property
    def pending(self) -> int:
        """Records waiting in memory to be handed over."""
        return sum(r is not None for r in self._status) + len(self._logs)

    @property
    def outbox_entries(self) -> int:
        """Messages waiting in the local outbox (0 without a store)."""
        return max(self._outbox_entries, 0)

    def start(self) -> None:
        if self._task is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._closing = False
        self._task = self._loop.create_task(self._run(), name="rota-reporter")

    async def stop(self) -> bool:
        """Stop the periodic flush and hand over what is left. ``False`` if records could not
        be handed over (no store, or the store failed): they are lost."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
            self._task = None
        ok = await self.flush()
        if not ok:
            log.warning(
                "reports left unpublished at stop",
                extra={"action": "reporter_stop", "pending": self.pending},
            )
        return ok

    # --- adding -------------------------------------------------------------------------------

    def add_status(self, record: StatusRecord) -> None:
        status = self._status
        oid = record.occurrence_id
        if record.status is S.RUNNING:
            self._running_at[oid] = len(status)
        else:
            index = self._running_at.pop(oid, None)
            if index is not None:
                earlier = status[index]
                if earlier is not None and earlier.attempt == record.attempt:
                    status[index] = None  # folded into the final report, with its time
                    record = _with_start(record, earlier.timestamp)
        status.append(record)
        if len(status) >= self._max_pending:
            self._wake.set()

    def has_pending_running(self, occurrence_id: UUID) -> bool:
        return occurrence_id in self._running_at

    def ack_after_flush(self, delivery: Delivery) -> None:
        """Acknowledge ``delivery`` once the records added so far are handed over."""
        self._acks.append(delivery)
        if len(self._acks) >= self._max_acks:
            self._wake.set()

    def add_log(self, record: LogRecord) -> None:
        with self._log_lock:
            self._logs.append(record)
            count = len(self._logs)
        if count >= self._max_pending:
            self._wake_from_any_thread()

    def _wake_from_any_thread(self) -> None:
        loop = self._loop
        if loop is None or threading.get_ident() == self._loop_thread:
            self._wake.set()
        elif not loop.is_closed():
            loop.call_soon_threadsafe(self._wake.set)

    # --- flushing -----------------------------------------------------------------------------

    async def _run(self) -> None:
        while not self._closing:
            if self._failures and self._store is None:
                await asyncio.sleep(self._backoff())
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._interval):
                        await self._wake.wait()
            self._wake.clear()
            if not self._closing:
                try:
                    await self.flush()
                except Exception:  # never let the reporter die; the next flush tries again
                    log.exception("flushing reports failed", extra={"action": "flush"})

    def _backoff(self) -> float:
        return min(self._interval * 2.0**self._failures, MAX_BACKOFF)

    async def flush(self) -> bool:
        """Hand over everything pending now, then acknowledge the deliveries waiting for it.
        ``True`` if nothing is left in memory."""
        async with self._flush_lock:
            status = [r for r in self._status if r is not None]
            self._status = []
            self._running_at = {}
            with self._log_lock:
                logs, self._logs = self._logs, []
            acks, self._acks = self._acks, []
            if self._store is None:
                status_ok, logs_ok = await self._publish_or_keep(status, logs)
            else:
                status_ok, logs_ok = await self._hand_over(self._store, status, logs)
            if status_ok:
                await _settle(acks)
            else:
                self._acks = [*acks, *self._acks]
            return status_ok and logs_ok

    async def _publish_or_keep(
        self, status: list[StatusRecord], logs: list[LogRecord]
    ) -> tuple[bool, bool]:
        """Without a store: publish; keep what failed in memory for the next flush."""
        status_ok, logs_ok = await self._publish_both(status, logs)
        self._keep(None if status_ok else status, None if logs_ok else logs)
        return status_ok, logs_ok

    async def _hand_over(
        self, store: LocalStore, status: list[StatusRecord], logs: list[LogRecord]
    ) -> tuple[bool, bool]:
        """With a store: replay the outbox first; publish; put what failed in the outbox and
        record the finalized attempts, in one local transaction."""
        publish = asyncio.get_running_loop().time() >= self._retry_at
        if publish and self._outbox_entries:  # -1 (not counted yet) reads it too
            publish = await self._replay(store)
        if not status and not logs:
            return True, True
        finals = [(r.occurrence_id, r.attempt) for r in status if r.status.is_terminal]
        status_ok = logs_ok = False
        if publish:
            status_ok, logs_ok = await self._publish_both(status, logs)
        rows: list[tuple[OutboxKind, bytes, int]] = []
        try:
            if status and not status_ok:
                rows.append((STATUS, encode_status_records(status), len(status)))
            if logs and not logs_ok:
                rows.append((LOGS, encode_log_records(logs), len(logs)))
            await store.save(outbox=rows, finals=finals)
        except Exception:
            log.exception(
                "writing the worker's local store failed; records kept in memory",
                extra={"action": "outbox_write", "count": sum(r[2] for r in rows)},
            )
            self._keep(None if status_ok else status, None if logs_ok else logs)
            return status_ok, logs_ok
        if rows:
            self._outbox_entries = self.outbox_entries + len(rows)
            self.outboxed += sum(r[2] for r in rows)
        return True, True

    def _keep(self, status: list[StatusRecord] | None, logs: list[LogRecord] | None) -> None:
        """Put records back in front of those added since (sent first next time)."""
        if status:
            shift = len(status)
            self._running_at = {k: v + shift for k, v in self._running_at.items()}
            self._status = [*status, *self._status]
        if logs:
            with self._log_lock:
                self._logs = [*logs, *self._logs]

    async def _publish_both(
        self, status: list[StatusRecord], logs: list[LogRecord]
    ) -> tuple[bool, bool]:
        if status and logs:
            status_ok, logs_ok = await asyncio.gather(
                self._publish(STATUS, status), self._publish(LOGS, logs)
            )
        else:
            status_ok = await self._publish(STATUS, status) if status else True
            logs_ok = await self._publish(LOGS, logs) if logs else True
        if status_ok and logs_ok:
            self._failures = 0
            self._retry_at = 0.0
        else:
            self._failed()
        return status_ok, logs_ok

    async def _publish(
        self, kind: OutboxKind, records: Sequence[StatusRecord] | Sequence[LogRecord]
    ) -> bool:
        try:
            await self._send(kind, records)
        except (Exception, asyncio.CancelledError) as exc:
            # A CancelledError that is not this task's own cancellation is a client library's
            # word for a lost connection (aiormq's, for a stuck one): a failed publish, whose
            # records are kept, and not the end of the reporter's loop.
            task = asyncio.current_task()
            if isinstance(exc, asyncio.CancelledError) and (task is None or task.cancelling()):
                raise
            log.warning(
                "publishing %s records failed (%s); %s",
                kind,
                _describe(exc),
                "kept in the outbox" if self._store is not None else "kept for the next flush",
                extra={"action": f"publish_{kind}", "count": len(records)},
            )
            return False
        return True

    async def _send(
        self, kind: OutboxKind, records: Sequence[StatusRecord] | Sequence[LogRecord]
    ) -> None:
        async with asyncio.timeout(self._publish_timeout):
            if kind == STATUS:
                await self._broker.publish_status(records)  # type: ignore[arg-type]
            else:
                await self._broker.publish_logs(records)  # type: ignore[arg-type]

    def _failed(self) -> None:
        self._failures = min(self._failures + 1, 8)
        self._retry_at = asyncio.get_running_loop().time() + self._backoff()

    # --- the outbox ---------------------------------------------------------------------------

    async def _replay(self, store: LocalStore) -> bool:
        """Publish the outbox, oldest first, each kind's records in their order; ``True``
        once it is empty, ``False`` at the first failure (what was published is removed)."""
        while True:
            try:
                entries = await store.outbox_head(_REPLAY_ROWS)
            except Exception:
                log.exception("reading the worker's outbox failed", extra={"action": "replay"})
                return False
            if not entries:
                if self._outbox_entries > 0:
                    log.info("outbox replayed", extra={"action": "replay"})
                self._outbox_entries = 0
                return True
            done, ok = await self._replay_entries(entries)
            try:
                await store.drop_outbox(done)
            except Exception:
                log.exception("removing replayed outbox entries failed", extra={"action": "replay"})
                return False
            self._outbox_entries = max(self.outbox_entries - len(done), 0)
            if not ok:
                return False

    async def _replay_entries(self, entries: list[OutboxEntry]) -> tuple[list[int], bool]:
        """Publish the entries (merged per kind, in order); the seqs published (or unreadable,
        dropped) and whether all were. Status and log records travel separately: only each
        kind's order matters."""
        done: list[int] = []
        for kind in (STATUS, LOGS):
            for chunk in _chunks([e for e in entries if e.kind == kind]):
                records, unreadable = _decode(kind, chunk)
                done.extend(e.seq for e in unreadable)  # not ours to fix: never blocking
                try:
                    if records:
                        await self._send(kind, records)
                except Exception as exc:
                    log.warning(
                        "replaying the outbox failed (%s); retried later",
                        _describe(exc),
                        extra={"action": "replay", "kind": kind},
                    )
                    self._failed()
                    return done, False
                done.extend(e.seq for e in chunk if e not in unreadable)
                self.replayed += len(records)
        return done, True

    async def count_outbox(self) -> int:
        """Count the store's outbox messages (at start: they are replayed first)."""
        if self._store is None:
            return 0
        size = await self._store.outbox_size()
        self._outbox_entries = size.entries
        if size.entries:
            log.info(
                "the outbox holds %d records from before; replaying them first",
                size.records,
                extra={"action": "replay", "count": size.records},
            )
        return size.entries


def _chunks(entries: list[OutboxEntry]) -> list[list[OutboxEntry]]:
    """Consecutive entries grouped into publishes of at most ``_REPLAY_RECORDS`` records (an
    entry is never split)."""
    chunks: list[list[OutboxEntry]] = []
    current: list[OutboxEntry] = []
    size = 0
    for entry in entries:
        if current and size + entry.records > _REPLAY_RECORDS:
            chunks.append(current)
            current, size = [], 0
        current.append(entry)
        size += entry.records
    if current:
        chunks.append(current)
    return chunks


def _decode(
    kind: OutboxKind, entries: list[OutboxEntry]
) -> tuple[list[StatusRecord] | list[LogRecord], list[OutboxEntry]]:
    """The entries' records, and the entries that cannot be read (logged)."""
    decode = decode_status_records if kind == STATUS else decode_log_records
    records: list[Any] = []
    unreadable: list[OutboxEntry] = []
    for entry in entries:
        try:
            records.extend(decode(entry.body))
        except ValidationError as exc:
            log.error(
                "unreadable outbox entry dropped: %s",
                exc,
                extra={"action": "replay", "count": entry.records},
            )
            unreadable.append(entry)
    return records, unreadable


def _with_start(record: StatusRecord, started_at: datetime) -> StatusRecord:
    """``record`` with the time of the Running report folded into it (a final report of every
    attempt started and finished within one flush takes this path)."""
    return msgspec.structs.replace(record, started_at=started_at)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def _settle(acks: list[Delivery]) -> None:
    for delivery in acks:
        try:
            await delivery.ack()
        except Exception:  # already settled elsewhere, or the broker is gone: redelivered
            log.debug("ack failed", exc_info=True, extra={"action": "ack"})
