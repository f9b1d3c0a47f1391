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
# has already ordered equal scores by member; across buckets the heads are compared by score,
# then (on a tie only) by member: its 16 bytes read once per head as three big-endian integers
# of 6, 5 and 5 bytes (each exact in a double), which is their byte order. Lua's `<` on strings
# follows the server's locale; a byte-by-byte loop per tie cost 5 times as much Redis time
# (bench/2026-11-29-redis-due.md).
_DUE_SCRIPT = """
local limit = tonumber(ARGV[2])
local page0 = math.min(limit, math.ceil(limit / #KEYS) + 16)
local unpack = struct.unpack
local lists, pos, offset, page, more = {}, {}, {}, {}, {}
local hs, ha, hb, hc = {}, {}, {}, {}
local function head(i)
  hs[i], ha[i] = tonumber(lists[i][pos[i] + 1]), nil
end
local function key(i)
  if ha[i] == nil then ha[i], hb[i], hc[i] = unpack('>I6I5I5', lists[i][pos[i]]) end
end
local function less(i, j)
  key(i)
  key(j)
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
  if l[1] then head(i) else hs[i] = nil end
end
for i = 1, #KEYS do
  offset[i], page[i] = 0, page0
  fill(i)
end
local out, n = {}, 0
while n < limit do
  local best, bs
  for i = 1, #KEYS do
    local s = hs[i]
    if s and (best == nil or s < bs or (s == bs and less(i, best))) then
      best, bs = i, s
    end
  end
  if best == nil then break end
  local l, p = lists[best], pos[best]
  out[#out + 1] = best
  out[#out + 1] = l[p]
  out[#out + 1] = l[p + 1]
  n = n + 1
  p = p + 2
  pos[best] = p
  if l[p] then
    head(best)
  elseif more[best] then
    fill(best)
  else
    hs[best] = nil
  end
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
        return [
            IndexEntry(UUID(bytes=flat[i + 1]), unique[int(flat[i]) - 1], float(flat[i + 2]))
            for i in range(0, len(flat), 3)
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
