"""The in-memory schedule index (embedded mode).

Each bucket keeps a dict ``job_id -> (due, seq)`` (the truth) and a binary heap of
``(due, job id as an int, seq, entry)`` with lazy deletion: a heap item is live only while the
dict still maps its job to the same ``seq``. Upsert, remove and earliest are O(log n)
amortised; a due read walks the heap as a tree in key order (a small frontier heap) without
popping anything, so reading the first ``k`` entries costs O(k log k) however large the bucket
is. Stale items are dropped from the top as they surface and the heap is rebuilt when they
outnumber live ones.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from uuid import UUID

from rota.core.ports import ScheduleIndex
from rota.core.records import IndexEntry

_HeapItem = tuple[float, int, int, IndexEntry]
"""``(due, job_id.int, seq, entry)``: ordered by due time, then job id (``seq`` is unique).
The id as an ``int`` orders as the ``UUID`` does, and ties (a burst due at one instant) are
compared in C instead of through ``UUID.__lt__``."""

_COMPACT_SLACK = 1024
"""Stale heap items tolerated above the number of live ones before the heap is rebuilt."""


class _Bucket:
    """One bucket's entries: the live map plus the lazily cleaned heap."""

    __slots__ = ("heap", "live")

    def __init__(self) -> None:
        self.live: dict[UUID, tuple[float, int]] = {}
        self.heap: list[_HeapItem] = []

    def upsert(self, entry: IndexEntry, seq: int) -> None:
        current = self.live.get(entry.job_id)
        if current is not None and current[0] == entry.due:
            return
        self.live[entry.job_id] = (entry.due, seq)
        heapq.heappush(self.heap, (entry.due, entry.job_id.int, seq, entry))
        self._maybe_compact()

    def remove(self, job_id: UUID) -> None:
        if self.live.pop(job_id, None) is not None:
            self._maybe_compact()

    def is_live(self, item: _HeapItem) -> bool:
        current = self.live.get(item[3].job_id)
        return current is not None and current[1] == item[2]

    def top(self) -> _HeapItem | None:
        """The earliest live item, after dropping stale ones that reached the top."""
        heap = self.heap
        while heap:
            item = heap[0]
            if self.is_live(item):
                return item
            heapq.heappop(heap)
        return None

    def reset(self, entries: Sequence[IndexEntry], seqs: itertools.count[int]) -> None:
        self.live = {}
        heap: list[_HeapItem] = []
        for entry in entries:
            seq = next(seqs)
            self.live[entry.job_id] = (entry.due, seq)
            heap.append((entry.due, entry.job_id.int, seq, entry))
        if len(heap) != len(self.live):  # a job listed twice keeps its last entry
            heap = [item for item in heap if self.is_live(item)]
        heapq.heapify(heap)
        self.heap = heap

    def _maybe_compact(self) -> None:
        if len(self.heap) > 2 * len(self.live) + _COMPACT_SLACK:
            self.heap = [item for item in self.heap if self.is_live(item)]
            heapq.heapify(self.heap)


class MemoryScheduleIndex(ScheduleIndex):
    """:class:`~rota.core.ports.ScheduleIndex` held in this process (embedded mode).

    Fast enough for hundreds of thousands of entries per bucket; state is lost with the
    process, which the port allows (the loader rebuilds the index from the store).
    """

    def __init__(self) -> None:
        self._buckets: dict[int, _Bucket] = {}
        self._seq = itertools.count()

    def _bucket(self, bucket: int) -> _Bucket:
        found = self._buckets.get(bucket)
        if found is None:
            found = self._buckets[bucket] = _Bucket()
        return found

    async def upsert(self, entries: Sequence[IndexEntry]) -> None:
        seq = self._seq
        for entry in entries:
            self._bucket(entry.bucket).upsert(entry, next(seq))

    async def remove(self, entries: Sequence[tuple[int, UUID]]) -> None:
        buckets = self._buckets
        for bucket, job_id in entries:
            found = buckets.get(bucket)
            if found is not None:
                found.remove(job_id)

    async def due(self, buckets: Sequence[int], until: float, limit: int) -> list[IndexEntry]:
        if limit <= 0:
            return []
        # Frontier items: (heap item, bucket, position in that bucket's heap).
        frontier: list[tuple[_HeapItem, _Bucket, int]] = []
        for bucket in self._existing(buckets):
            if bucket.top() is not None and bucket.heap[0][0] <= until:
                frontier.append((bucket.heap[0], bucket, 0))
        heapq.heapify(frontier)
        found: list[IndexEntry] = []
        while frontier and len(found) < limit:
            item, bucket, pos = heapq.heappop(frontier)
            if bucket.is_live(item):
                found.append(item[3])
            heap = bucket.heap
            for child in (2 * pos + 1, 2 * pos + 2):
                if child < len(heap) and heap[child][0] <= until:
                    heapq.heappush(frontier, (heap[child], bucket, child))
        return found

    async def earliest(self, buckets: Sequence[int]) -> float | None:
        best: float | None = None
        for bucket in self._existing(buckets):
            item = bucket.top()
            if item is not None and (best is None or item[0] < best):
                best = item[0]
        return best

    async def replace_bucket(self, bucket: int, entries: Sequence[IndexEntry]) -> None:
        if any(entry.bucket != bucket for entry in entries):
            raise ValueError(f"replace_bucket({bucket}) got entries of another bucket")
        self._bucket(bucket).reset(entries, self._seq)

    async def size(self, buckets: Sequence[int]) -> int:
        return sum(len(bucket.live) for bucket in self._existing(buckets))

    async def close(self) -> None:
        """Nothing to release; the entries stay readable."""

    def _existing(self, buckets: Sequence[int]) -> list[_Bucket]:
        found = self._buckets
        return [found[b] for b in dict.fromkeys(buckets) if b in found]
