"""The limits in Redis (distributed mode, :class:`~rota.core.ports.limits.LimitMemory`).

- ``{prefix}:limits`` (string): the limits the workers follow, JSON (``[{"type", "max", "key",
  "ratePerSecond"}]``), published by every scheduler instance.
- ``{prefix}:limit:{slot key}`` (zset): a semaphore, token (occurrence id) -> lease end (ms,
  Redis ``TIME``); entries past their lease are pruned before every count, so a dead holder's
  slot is free once its lease ends. ``{prefix}:limit-keys`` (set) lists the semaphores.
- ``{prefix}:rate:{job type}`` (zset): the starts of the rate's sliding window (ms).
- ``{prefix}:limit-waiting`` (hash): token -> ``{expires ms}:{since ms}:{label}``.

Each call is one Lua script (a batch of requests in one round trip), timed by the server's
clock so that workers with skewed clocks agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson

from rota.core.limits import (
    JobLimit,
    LimitGrant,
    LimitHold,
    LimitRequest,
    LimitUsage,
    LimitWaiter,
    limits_from_json,
    limits_to_json,
    rate_window,
)
from rota.core.ports.limits import LimitMemory
from rota.redis.client import unavailable
from rota.redis.keys import RedisKeys

if TYPE_CHECKING:
    from redis.asyncio import Redis

_NOW_MS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# KEYS: waiting hash, semaphore set. ARGV: prefix, lease ms, room, requests (JSON: a list of
# [token, slot key or '', max, rate key or '', count, window ms, label]).
# Returns a flat list (granted 0/1, wait ms, holding) per request.
ACQUIRE_LIMITS_SCRIPT = (
    _NOW_MS
    + """
local prefix, lease, room = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local requests = cjson.decode(ARGV[4])
local out = {}
for i, r in ipairs(requests) do
  local token, skey, max, rkey, count, window = r[1], r[2], r[3], r[4], r[5], r[6]
  local ok, wait, holding = 1, 0, 0
  local zs, zr = nil, nil
  if room <= 0 then ok = 0 end
  if ok == 1 and skey ~= '' then
    zs = prefix .. ':limit:' .. skey
    redis.call('ZREMRANGEBYSCORE', zs, '-inf', now)
    if redis.call('ZSCORE', zs, token) then
      redis.call('ZADD', zs, now + lease, token)
      ok = 2
    else
      holding = redis.call('ZCARD', zs)
      if holding >= max then ok = 0 end
    end
  end
  if ok == 1 and rkey ~= '' then
    zr = prefix .. ':rate:' .. rkey
    redis.call('ZREMRANGEBYSCORE', zr, '-inf', now - window)
    if redis.call('ZCARD', zr) >= count then
      ok = 0
      local oldest = redis.call('ZRANGE', zr, 0, 0, 'WITHSCORES')
      wait = tonumber(oldest[2]) + window - now
    end
  end
  if ok == 1 then
    if zs then
      redis.call('ZADD', zs, now + lease, token)
      redis.call('SADD', KEYS[2], skey)
    end
    if zr then
      redis.call('ZADD', zr, now, token .. ':' .. now .. ':' .. i)
      redis.call('PEXPIRE', zr, window * 2 + 1000)
    end
  end
  if ok > 0 then
    room = room - 1
    redis.call('HDEL', KEYS[1], token)
    out[#out + 1] = 1
  else
    local since = now
    local current = redis.call('HGET', KEYS[1], token)
    if current then since = tonumber(string.match(current, '^%d+:(%d+):')) end
    redis.call('HSET', KEYS[1], token, string.format('%d:%d:%s', now + lease, since, r[7]))
    out[#out + 1] = 0
  end
  out[#out + 1] = wait
  out[#out + 1] = holding
end
return out
"""
)

# ARGV: prefix, lease ms, then (slot key, token) pairs. Returns how many were renewed.
RENEW_LIMITS_SCRIPT = (
    _NOW_MS
    + """
local renewed = 0
for i = 3, #ARGV, 2 do
  renewed = renewed + redis.call('ZADD', ARGV[1] .. ':limit:' .. ARGV[i], 'XX', 'CH',
                                 now + tonumber(ARGV[2]), ARGV[i + 1])
end
return renewed
"""
)

# KEYS: waiting hash. ARGV: prefix, then (slot key or '', token) pairs.
RELEASE_LIMITS_SCRIPT = """
for i = 2, #ARGV, 2 do
  if ARGV[i] ~= '' then redis.call('ZREM', ARGV[1] .. ':limit:' .. ARGV[i], ARGV[i + 1]) end
  redis.call('HDEL', KEYS[1], ARGV[i + 1])
end
return 0
"""

# KEYS: waiting hash. ARGV: tokens. Returns a flat list (token, label) of those waiting now.
WAITING_FOR_SCRIPT = (
    _NOW_MS
    + """
local out = {}
for i = 1, #ARGV do
  local value = redis.call('HGET', KEYS[1], ARGV[i])
  if value then
    local expires, _, label = string.match(value, '^(%d+):(%d+):(.*)$')
    if tonumber(expires) > now then
      out[#out + 1] = ARGV[i]
      out[#out + 1] = label
    end
  end
end
return out
"""
)

# KEYS: waiting hash, semaphore set. ARGV: prefix. Returns {flat (key, holders), flat
# (token, since ms, label)}; drops expired holders and waiters, and empty semaphores.
USAGE_SCRIPT = (
    _NOW_MS
    + """
local running = {}
for _, skey in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  local zs = ARGV[1] .. ':limit:' .. skey
  redis.call('ZREMRANGEBYSCORE', zs, '-inf', now)
  local n = redis.call('ZCARD', zs)
  if n == 0 then redis.call('SREM', KEYS[2], skey) else
    running[#running + 1] = skey
    running[#running + 1] = n
  end
end
local waiting = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local expires, since, label = string.match(all[i + 1], '^(%d+):(%d+):(.*)$')
  if tonumber(expires) <= now then redis.call('HDEL', KEYS[1], all[i]) else
    waiting[#waiting + 1] = all[i]
    waiting[#waiting + 1] = since
    waiting[#waiting + 1] = label
  end
end
return {running, waiting}
"""
)


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


class RedisLimits(LimitMemory):
    """The limits' part of :class:`~rota.coordination.redis.RedisCoordination`."""

    _redis: Redis
    _keys: RedisKeys

    def _init_limits(self, redis: Redis) -> None:
        self._acquire_limits = redis.register_script(ACQUIRE_LIMITS_SCRIPT)
        self._renew_limits = redis.register_script(RENEW_LIMITS_SCRIPT)
        self._release_limits = redis.register_script(RELEASE_LIMITS_SCRIPT)
        self._limit_usage = redis.register_script(USAGE_SCRIPT)
        self._waiting_for = redis.register_script(WAITING_FOR_SCRIPT)

    async def put_limits(self, limits: Sequence[JobLimit]) -> None:
        with unavailable("publish limits"):
            await self._redis.set(self._keys.limits, limits_to_json(limits))

    async def published_limits(self) -> list[JobLimit] | None:
        with unavailable("read limits"):
            raw: Any = await self._redis.get(self._keys.limits)
        return None if raw is None else limits_from_json(bytes(raw))

    async def acquire_limits(
        self, holder: str, requests: Sequence[LimitRequest], lease: float, room: int
    ) -> list[LimitGrant]:
        if not requests:
            return []
        encoded = []
        for r in requests:
            count, window = rate_window(r.rate) if r.rate_key is not None else (0, 0.0)
            encoded.append(
                [
                    r.token,
                    r.slot_key or "",
                    r.max_concurrent,
                    r.rate_key or "",
                    count,
                    _ms(window) if r.rate_key is not None else 0,
                    r.label,
                ]
            )
        keys = [self._keys.limit_waiting, self._keys.limit_keys]
        args: list[str | int | bytes] = [self._keys.prefix, _ms(lease), room, orjson.dumps(encoded)]
        with unavailable("acquire limits"):
            flat: Any = await self._acquire_limits(keys=keys, args=args)
        return [
            LimitGrant(bool(int(flat[i])), int(flat[i + 1]) / 1000, int(flat[i + 2]))
            for i in range(0, len(flat), 3)
        ]

    async def renew_limits(self, holder: str, holds: Sequence[LimitHold], lease: float) -> int:
        if not holds:
            return 0
        args: list[str | int] = [self._keys.prefix, _ms(lease)]
        for hold in holds:
            args += [hold.slot_key, hold.token]
        with unavailable("renew limits"):
            return int(await self._renew_limits(args=args))

    async def release_limits(self, holder: str, holds: Sequence[LimitHold]) -> None:
        if not holds:
            return
        args: list[str] = [self._keys.prefix]
        for hold in holds:
            args += [hold.slot_key, hold.token]
        with unavailable("release limits"):
            await self._release_limits(keys=[self._keys.limit_waiting], args=args)

    async def limit_waiting_for(self, tokens: Sequence[str]) -> dict[str, str]:
        if not tokens:
            return {}
        with unavailable("read limit waiters"):
            flat: Any = await self._waiting_for(keys=[self._keys.limit_waiting], args=list(tokens))
        return {
            bytes(flat[i]).decode(): bytes(flat[i + 1]).decode() for i in range(0, len(flat), 2)
        }

    async def limit_usage(self) -> LimitUsage:
        keys = [self._keys.limit_waiting, self._keys.limit_keys]
        with unavailable("read limit usage"):
            running, waiting = await self._limit_usage(keys=keys, args=[self._keys.prefix])
        held = {bytes(running[i]).decode(): int(running[i + 1]) for i in range(0, len(running), 2)}
        waiters = [
            LimitWaiter(
                bytes(waiting[i]).decode(),
                bytes(waiting[i + 2]).decode(),
                datetime.fromtimestamp(int(waiting[i + 1]) / 1000, UTC),
            )
            for i in range(0, len(waiting), 3)
        ]
        waiters.sort(key=lambda w: w.since)
        return LimitUsage(running=held, waiting=waiters)
