"""The schedule index in Redis (distributed mode): one sorted set per bucket.

A member is the job id's 16 bytes (big-endian, so byte order is job id order and Redis breaks
score ties in job id order), its score the due time in epoch seconds (a double, read back
exactly). Only the hot window is held; the store stays the source of truth.

Round trips: ``upsert``/``remove``/``earliest``/``size`` are one pipeline per call whatever the
number of buckets; ``due`` is one Lua script that merges the buckets by (due, job id), reading
each in pages; ``replace_bucket`` is one ``MULTI`` (DEL + ZADD).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING
from uuid import UUID

import msgspec

from rota.core.ports import ScheduleIndex
from rota.core.records import IndexEntry
from rota.redis.client import DEFAULT_SOCKET_TIMEOUT, connect, unavailable
from rota.redis.keys import DEFAULT_PREFIX, RedisKeys

if TYPE_CHECKING:
    from redis.asyncio import Redis

_CHUNK = 10_000
"""Members per ZADD/ZREM command (a big upsert is several commands in one pipeline)."""

# KEYS: bucket sorted sets; ARGV: until (score), limit. Returns a flat list of
# (position of the key in KEYS, member, score as Redis printed it) in (score, member) order.
# Each bucket is read in pages (the first about limit / #KEYS, doubling on every refill), so
# a read costs about ``limit`` entries however many buckets are merged. Within a bucket Redis
# has already ordered equal scores by member; across buckets the buckets' heads are kept in a
# binary heap by (score, member), so an entry costs about 2·log2(#KEYS) comparisons, not one
# per bucket. A head's member is compared only on a tie of scores: its 16 bytes read once as
# three big-endian integers of 6, 5 and 5 bytes (each exact in a double), which is their byte
# order. Lua's `<` on strings follows the server's locale; a byte-by-byte loop per tie cost 5
# times as much Redis time (bench/2026-11-29-redis-due.md), and a scan of every head per entry
# twice as much as the heap (bench/2026-11-30-distributed-cpu.md).
_DUE_SCRIPT = """
local limit = tonumber(ARGV[2])
local page0 = math.min(limit, math.ceil(limit / #KEYS) + 16)
local unpack = struct.unpack
local lists, pos, offset, page, more = {}, {}, {}, {}, {}
local hs, ha, hb, hc = {}, {}, {}, {}
local function less(i, j)
  local si, sj = hs[i], hs[j]
  if si ~= sj then return si < sj end
  if ha[i] == nil then ha[i], hb[i], hc[i] = unpack('>I6I5I5', lists[i][pos[i]]) end
  if ha[j] == nil then ha[j], hb[j], hc[j] = unpack('>I6I5I5', lists[j][pos[j]]) end
  if ha[i] ~= ha[j] then return ha[i] < ha[j] end
  if hb[i] ~= hb[j] then return hb[i] < hb[j] end
  return hc[i] < hc[j]
end
local function fill(i)
  local l = redis.call('ZRANGE', KEYS[i], '-inf', ARGV[1], 'BYSCORE', 'LIMIT', offset[i],
                       page[i], 'WITHSCORES')
  lists[i], pos[i] = l, 1
  offset[i] = offset[i] + #l / 2
  more[i] = #l == 2 * page[i]
  page[i] = math.min(2 * page[i], limit)
  if l[1] == nil then return false end
  hs[i], ha[i] = tonumber(l[2]), nil
  return true
end
local heap, n = {}, 0
local function down(k)
  local x = heap[k]
  while true do
    local c = 2 * k
    if c > n then break end
    if c < n and less(heap[c + 1], heap[c]) then c = c + 1 end
    if not less(heap[c], x) then break end
    heap[k] = heap[c]
    k = c
  end
  heap[k] = x
end
for i = 1, #KEYS do
  offset[i], page[i] = 0, page0
  if fill(i) then
    n = n + 1
    heap[n] = i
  end
end
for k = math.floor(n / 2), 1, -1 do down(k) end
local out, taken = {}, 0
while taken < limit and n > 0 do
  local best = heap[1]
  local l, p = lists[best], pos[best]
  out[#out + 1] = best
  out[#out + 1] = l[p]
  out[#out + 1] = l[p + 1]
  taken = taken + 1
  p = p + 2
  pos[best] = p
  local alive
  if l[p] then
    hs[best], ha[best] = tonumber(l[p + 1]), nil
    alive = true
  else
    alive = more[best] and fill(best)
  end
  if not alive then
    heap[1] = heap[n]
    heap[n] = nil
    n = n - 1
  end
  if n > 1 then down(1) end
end
return out
"""


def _chunks(mapping: dict[bytes, float]) -> list[dict[bytes, float]]:
    items = list(mapping.items())
    return [dict(items[i : i + _CHUNK]) for i in range(0, len(items), _CHUNK)]


class RedisScheduleIndex(ScheduleIndex):
    """:class:`~rota.core.ports.ScheduleIndex` as Redis sorted sets, one per bucket.

    ``redis`` is a client from :func:`rota.redis.client.connect` (bytes replies); it is closed
    by :meth:`close` only with ``close_client=True`` (as :meth:`from_url` does).
    """

    def __init__(
        self, redis: Redis, *, prefix: str = DEFAULT_PREFIX, close_client: bool = False
    ) -> None:
        self._redis = redis
        self._keys = RedisKeys(prefix)
        self._close_client = close_client
        self._closed = False
        self._due_script = redis.register_script(_DUE_SCRIPT)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        socket_timeout: float = DEFAULT_SOCKET_TIMEOUT,
    ) -> RedisScheduleIndex:
        """An index with its own client, closed with the index."""
        return cls(connect(url, socket_timeout=socket_timeout), prefix=prefix, close_client=True)

    async def upsert(self, entries: Sequence[IndexEntry]) -> None:
        by_bucket: defaultdict[int, dict[bytes, float]] = defaultdict(dict)
        for entry in entries:
            by_bucket[entry.bucket][entry.job_id.bytes] = entry.due
        if not by_bucket:
            return
        with unavailable("schedule index upsert"):
            async with self._redis.pipeline(transaction=False) as pipe:
                for bucket, members in by_bucket.items():
                    for chunk in _chunks(members):
                        pipe.zadd(self._keys.index(bucket), chunk)
                await pipe.execute()

    async def remove(self, entries: Sequence[tuple[int, UUID]]) -> None:
        by_bucket: defaultdict[int, list[bytes]] = defaultdict(list)
        for bucket, job_id in entries:
            by_bucket[bucket].append(job_id.bytes)
        if not by_bucket:
            return
        with unavailable("schedule index remove"):
            async with self._redis.pipeline(transaction=False) as pipe:
                for bucket, members in by_bucket.items():
                    for start in range(0, len(members), _CHUNK):
                        pipe.zrem(self._keys.index(bucket), *members[start : start + _CHUNK])
                await pipe.execute()

    async def due(self, buckets: Sequence[int], until: float, limit: int) -> list[IndexEntry]:
        unique = list(dict.fromkeys(buckets))
        if limit <= 0 or not unique or math.isnan(until):
            return []
        keys = [self._keys.index(b) for b in unique]
        with unavailable("schedule index due"):
            flat = await self._due_script(keys=keys, args=[repr(float(until)), limit])
        job_ids = msgspec.convert(flat[1::3], list[UUID])  # in C: a tenth of UUID(bytes=…)
        return [
            IndexEntry(job_id, unique[int(position) - 1], float(score))
            for job_id, position, score in zip(job_ids, flat[::3], flat[2::3], strict=True)
        ]

    async def earliest(self, buckets: Sequence[int]) -> float | None:
        unique = list(dict.fromkeys(buckets))
        if not unique:
            return None
        with unavailable("schedule index earliest"):
            async with self._redis.pipeline(transaction=False) as pipe:
                for bucket in unique:
                    pipe.zrange(self._keys.index(bucket), 0, 0, withscores=True)
                heads: list[list[tuple[bytes, float]]] = await pipe.execute()
        dues = [head[0][1] for head in heads if head]
        return min(dues) if dues else None

    async def replace_bucket(self, bucket: int, entries: Sequence[IndexEntry]) -> None:
        if any(entry.bucket != bucket for entry in entries):
            raise ValueError(f"replace_bucket({bucket}) got entries of another bucket")
        members = {entry.job_id.bytes: entry.due for entry in entries}
        key = self._keys.index(bucket)
        with unavailable("schedule index replace_bucket"):
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.delete(key)
                for chunk in _chunks(members):
                    pipe.zadd(key, chunk)
                await pipe.execute()

    async def size(self, buckets: Sequence[int]) -> int:
        unique = list(dict.fromkeys(buckets))
        if not unique:
            return 0
        with unavailable("schedule index size"):
            async with self._redis.pipeline(transaction=False) as pipe:
                for bucket in unique:
                    pipe.zcard(self._keys.index(bucket))
                counts: list[int] = await pipe.execute()
        return sum(counts)

    async def close(self) -> None:
        """Close the client if this index owns it (idempotent); the entries stay in Redis."""
        if self._closed:
            return
        self._closed = True
        if self._close_client:
            await self._redis.aclose()
