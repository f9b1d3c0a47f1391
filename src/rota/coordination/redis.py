"""Coordination in Redis (distributed mode): leases, heartbeats, worker registry, wake-ups.

- **Bucket leases** live in one hash (bucket -> ``fence:expires_us:owner``); each acquire,
  release and listing is one Lua script, timed by the server's clock (``TIME``), so instances
  with skewed clocks agree on expiry. A bucket granted to a new owner (or to the same owner
  after its lease expired) takes the next value of its fence counter (``HINCRBY``).
- **Scheduler instances and workers** are JSON values under keys with a TTL plus an index set;
  listing reads the index, then one script returns the live values and drops the ids whose key
  has expired. Worker registrations use camelCase JSON (``instanceId``, ``workerId``, ``host``,
  ``pid``, ``jobTypes``, ``concurrency``, ``version``, ``currentLoad``, ``startedAt``,
  ``lastHeartbeat``, ``envelopeJobs``; :mod:`.registration`) so workers written in other
  languages can register too.
- **Wake-ups** and **cancellations** go through capped streams (``XADD MAXLEN ~``):
  ``{prefix}:wakeups`` (field ``due``, epoch seconds) and ``{prefix}:cancellations`` (field
  ``occurrence``, an occurrence id, and ``reason`` when one was given). Each iterator starts
  at its stream's last id as of its creation and reads it with short blocking ``XREAD`` calls
  on its own connection, resuming from the last id it saw after a cancelled read or a lost
  connection (pub/sub would lose what was sent meanwhile).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar
from uuid import UUID, uuid4

import orjson

from rota.coordination.claim_scripts import CLAIM_SCRIPT, RELEASE_CLAIMS_SCRIPT
from rota.coordination.limits_redis import RedisLimits
from rota.coordination.registration import worker_from_json, worker_json
from rota.core.errors import BackendUnavailableError
from rota.core.events import (
    Event,
    EventId,
    format_event_id,
    pack_events,
    parse_event_id,
    unpacked,
)
from rota.core.models import WorkerInfo
from rota.core.ports import Coordination
from rota.core.records import (
    AttemptClaim,
    Cancellation,
    ClaimBatch,
    ClaimOutcome,
    ClaimRequest,
    Lease,
)
from rota.redis.client import DEFAULT_SOCKET_TIMEOUT, connect, unavailable
from rota.redis.keys import DEFAULT_PREFIX, RedisKeys

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = logging.getLogger(__name__)

_OUTCOMES = {outcome.value.encode(): outcome for outcome in ClaimOutcome}
"""Claim outcomes by the bytes the claim script answers (a batch's outcomes, without an enum
lookup each)."""
T = TypeVar("T")

_LEASE_OF = """
local function lease_of(value)
  local fence, expires, owner = string.match(value, '^(%d+):(%d+):(.*)$')
  return tonumber(fence), tonumber(expires), owner
end
"""

_NOW_US = (
    _LEASE_OF
    + """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
"""
)

# KEYS: leases hash, fences hash; ARGV: owner, ttl (µs), buckets...
# Returns a flat list (bucket, fence, expires_us) of the leases the owner holds afterwards.
_ACQUIRE_SCRIPT = (
    _NOW_US
    + """
local owner, expires = ARGV[1], now + tonumber(ARGV[2])
local out = {}
for i = 3, #ARGV do
  local bucket, fence = ARGV[i], nil
  local current = redis.call('HGET', KEYS[1], bucket)
  local free = true
  if current then
    local f, e, o = lease_of(current)
    if e > now then
      free = false
      if o == owner then fence = f end
    end
  end
  if free then fence = redis.call('HINCRBY', KEYS[2], bucket, 1) end
  if fence then
    redis.call('HSET', KEYS[1], bucket,
               string.format('%d:%.0f:%s', fence, expires, owner))
    out[#out + 1] = tonumber(bucket)
    out[#out + 1] = fence
    out[#out + 1] = expires
  end
end
return out
"""
)

# KEYS: leases hash; ARGV: owner, buckets... Deletes the owner's leases among them.
_RELEASE_SCRIPT = (
    _LEASE_OF
    + """
for i = 2, #ARGV do
  local current = redis.call('HGET', KEYS[1], ARGV[i])
  if current then
    local _, _, o = lease_of(current)
    if o == ARGV[1] then redis.call('HDEL', KEYS[1], ARGV[i]) end
  end
end
return 0
"""
)

# KEYS: leases hash. Returns a flat list (bucket, fence, expires_us, owner) of unexpired leases.
_LEASES_SCRIPT = (
    _NOW_US
    + """
local all = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  local f, e, o = lease_of(all[i + 1])
  if e > now then
    out[#out + 1] = tonumber(all[i])
    out[#out + 1] = f
    out[#out + 1] = e
    out[#out + 1] = o
  end
end
return out
"""
)

# KEYS: index set, then the value key of each id in ARGV. Returns a flat list (id, value) of
# the ids whose key still exists, and removes the others from the index.
_LIVE_SCRIPT = """
local out = {}
for i = 1, #ARGV do
  local value = redis.call('GET', KEYS[i + 1])
  if value then
    out[#out + 1] = ARGV[i]
    out[#out + 1] = value
  else
    redis.call('SREM', KEYS[1], ARGV[i])
  end
end
return out
"""

# KEYS: generation key, index set, then the value key of each id in ARGV[2..]; ARGV[1]: a
# new generation token, set if the registry has none (a fresh or emptied Redis). Returns the
# registry's generation, then a flat list (id, value, milliseconds to live) of the ids whose
# key still exists, and removes the others from the index.
_WORKERS_SCRIPT = """
local generation = redis.call('GET', KEYS[1])
if not generation then
  generation = ARGV[1]
  redis.call('SET', KEYS[1], generation)
end
local out = {generation}
for i = 2, #ARGV do
  local key = KEYS[i + 1]
  local value = redis.call('GET', key)
  if value then
    out[#out + 1] = ARGV[i]
    out[#out + 1] = value
    out[#out + 1] = redis.call('PTTL', key)
  else
    redis.call('SREM', KEYS[2], ARGV[i])
  end
end
return out
"""

_WAKEUP_CAP = 1000
"""Approximate number of wake-ups the stream keeps (``MAXLEN ~``)."""

EVENT_CAP = 2000
"""Approximate number of entries the event stream keeps (``MAXLEN ~``) by default."""
EVENTS_PER_ENTRY = 100
"""Events packed into one stream entry at most: a batch of events is one ``XADD`` per this
many (in one pipeline), so the feed costs the hot paths next to nothing per event."""
_EVENTS_FIELD = b"e"


def _uuid(raw: bytes) -> UUID:
    return UUID(raw.decode())


def _unpack_cancellation(_entry_id: bytes, fields: Any) -> list[Cancellation]:
    reason = fields.get(b"reason")
    below = fields.get(b"below")
    return [
        Cancellation(
            _uuid(fields[b"occurrence"]),
            None if reason is None else reason.decode(),
            None if below is None else int(below),
        )
    ]


def _outcome_taken(task: asyncio.Future[Any]) -> None:
    """Take a finished task's exception, so that asyncio does not log it as never retrieved."""
    if not task.cancelled():
        task.exception()


def _ttl_ms(ttl: float) -> int:
    return max(1, round(ttl * 1000))


class RedisCoordination(RedisLimits, Coordination):
    """:class:`~rota.core.ports.Coordination` shared through Redis by every instance.

    ``redis`` is a client from :func:`rota.redis.client.connect` (bytes replies); it is closed
    by :meth:`close` only with ``close_client=True`` (as :meth:`from_url` does). Wake-up
    iterators block on the server for at most ``block_seconds`` per read (keep it below the
    client's socket timeout).
    """

    def __init__(
        self,
        redis: Redis,
        *,
        prefix: str = DEFAULT_PREFIX,
        close_client: bool = False,
        wakeup_cap: int = _WAKEUP_CAP,
        event_cap: int = EVENT_CAP,
        block_seconds: float = 1.0,
    ) -> None:
        self._redis = redis
        self._event_cap = max(1, event_cap)
        self._keys = RedisKeys(prefix)
        self._close_client = close_client
        self._closed = False
        self._wakeup_cap = wakeup_cap
        self._block_ms = max(1, round(block_seconds * 1000))
        self._subscribers: set[_StreamWakeups[Any]] = set()
        self._acquire = redis.register_script(_ACQUIRE_SCRIPT)
        self._release = redis.register_script(_RELEASE_SCRIPT)
        self._list_leases = redis.register_script(_LEASES_SCRIPT)
        self._live = redis.register_script(_LIVE_SCRIPT)
        self._live_workers = redis.register_script(_WORKERS_SCRIPT)
        self._claim = redis.register_script(CLAIM_SCRIPT)
        self._release_claims = redis.register_script(RELEASE_CLAIMS_SCRIPT)
        self._init_limits(redis)
        self._generation_key = self._keys.registry
        self._generation: bytes | None = None
        self._seen: dict[str, tuple[WorkerInfo, float]] = {}
        """Registrations of the current generation as last read: instance -> (info, its TTL
        in seconds, the longest seen)."""
        self._orphans: dict[str, tuple[WorkerInfo, float, float]] = {}
        """Registrations a loss of the registry took away, live until they expire: instance
        -> (info, TTL, expiry on the loop's clock)."""
        """Registrations a data loss took away before they expired (see :meth:`workers`)."""

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        socket_timeout: float = DEFAULT_SOCKET_TIMEOUT,
        event_cap: int = EVENT_CAP,
    ) -> RedisCoordination:
        """A coordination with its own client, closed with it."""
        client = connect(url, socket_timeout=socket_timeout)
        return cls(client, prefix=prefix, close_client=True, event_cap=event_cap)

    async def close(self) -> None:
        """End every wake-up iterator and close the client if owned (idempotent)."""
        subscribers, self._subscribers = self._subscribers, set()
        for subscriber in subscribers:
            await subscriber.aclose()
        if not self._closed:
            self._closed = True
            if self._close_client:
                await self._redis.aclose()

    # --- bucket leases --------------------------------------------------------------------

    async def acquire_buckets(
        self, instance_id: str, buckets: Sequence[int], ttl: float
    ) -> dict[int, Lease]:
        unique = list(dict.fromkeys(buckets))
        if not unique:
            return {}
        keys = [self._keys.leases, self._keys.fences]
        args: list[str | int] = [instance_id, max(1, round(ttl * 1_000_000)), *unique]
        with unavailable("acquire bucket leases"):
            flat = await self._acquire(keys=keys, args=args)
        held = {}
        for i in range(0, len(flat), 3):
            bucket = int(flat[i])
            held[bucket] = Lease(bucket, instance_id, int(flat[i + 1]), int(flat[i + 2]) / 1e6)
        return held

    async def release_buckets(self, instance_id: str, buckets: Sequence[int]) -> None:
        if not buckets:
            return
        with unavailable("release bucket leases"):
            await self._release(keys=[self._keys.leases], args=[instance_id, *buckets])

    async def leases(self) -> dict[int, Lease]:
        with unavailable("list bucket leases"):
            flat = await self._list_leases(keys=[self._keys.leases])
        found = [
            Lease(int(flat[i]), flat[i + 3].decode(), int(flat[i + 1]), int(flat[i + 2]) / 1e6)
            for i in range(0, len(flat), 4)
        ]
        return {lease.bucket: lease for lease in sorted(found, key=lambda lease: lease.bucket)}

    # --- scheduler instances and workers --------------------------------------------------

    async def heartbeat_instance(
        self, instance_id: str, info: Mapping[str, str], ttl: float
    ) -> None:
        value = orjson.dumps(dict(info))
        await self._put(
            self._keys.instances, self._keys.instance(instance_id), instance_id, value, ttl
        )

    async def instances(self) -> dict[str, Mapping[str, str]]:
        live = await self._live_values(self._keys.instances, self._keys.instance)
        return {instance_id: orjson.loads(raw) for instance_id, raw in live}

    async def register_worker(self, info: WorkerInfo, ttl: float) -> None:
        key = self._keys.worker(info.instance_id)
        await self._put(self._keys.workers, key, info.instance_id, worker_json(info), ttl)

    async def unregister_worker(self, instance_id: str) -> None:
        with unavailable("unregister worker"):
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.delete(self._keys.worker(instance_id))
                pipe.srem(self._keys.workers, instance_id)
                await pipe.execute()

    async def workers(self) -> list[WorkerInfo]:
        """Live, well-formed registrations; a malformed one (a worker written elsewhere that
        got the format wrong) is logged and left out instead of hiding every other worker.

        Redis may lose the registry (``FLUSHALL``, a restart without persistence, a failover to
        an empty replica): until the workers' next heartbeats every group would look gone (their
        running occurrences taken for a dead worker's). The registry therefore carries a
        generation token; when it changes, the registrations this instance read last before the
        loss (and those still kept from an earlier loss) stay live for one more TTL of theirs
        from then (they could not refresh while Redis was away), unless they register again
        sooner."""
        live = await self._read_workers()
        now = asyncio.get_running_loop().time()
        seen: dict[str, tuple[WorkerInfo, float]] = {}
        for instance_id, raw, ttl_ms in live:
            try:
                info = worker_from_json(raw)
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("ignoring malformed worker registration %s: %s", instance_id, exc)
                continue
            known = self._seen.get(instance_id)
            ttl = max(ttl_ms / 1000, known[1] if known else 0.0)
            seen[instance_id] = (info, ttl)
        self._seen = seen
        orphans = {
            instance_id: entry
            for instance_id, entry in self._orphans.items()
            if instance_id not in seen and entry[2] > now
        }
        self._orphans = orphans
        merged = {**{i: e[0] for i, e in orphans.items()}, **{i: e[0] for i, e in seen.items()}}
        return [merged[instance_id] for instance_id in sorted(merged)]

    async def _read_workers(self) -> list[tuple[str, bytes, int]]:
        """``(id, value, ms to live)`` of the live worker registrations; notices a lost
        registry (its generation changed) and keeps what was seen before as orphans."""
        key_of = self._keys.worker
        with unavailable("list registrations"):
            members: set[Any] = await self._redis.smembers(self._keys.workers)
            ids = sorted(bytes(member).decode() for member in members)
            keys = [self._generation_key, self._keys.workers, *map(key_of, ids)]
            flat = await self._live_workers(keys=keys, args=[uuid4().hex, *ids])
        generation = bytes(flat[0])
        if self._generation is not None and generation != self._generation:
            now = asyncio.get_running_loop().time()
            known = [(i, info, ttl) for i, (info, ttl, _) in self._orphans.items()]
            known += [(i, info, ttl) for i, (info, ttl) in self._seen.items()]
            carried = {i: (info, ttl, now + ttl) for i, info, ttl in known if ttl > 0}
            if carried:
                log.warning(
                    "the worker registry lost its data; %d registrations kept for their TTL",
                    len(carried),
                    extra={"action": "registry_lost", "count": len(carried)},
                )
            self._orphans.update(carried)
            self._seen = {}
        self._generation = generation
        return [(flat[i].decode(), flat[i + 1], int(flat[i + 2])) for i in range(1, len(flat), 3)]

    async def _put(self, index: str, key: str, member: str, value: bytes, ttl: float) -> None:
        with unavailable("register"):
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.set(key, value, px=_ttl_ms(ttl))
                pipe.sadd(index, member)
                await pipe.execute()

    async def _live_values(
        self, index: str, key_of: Callable[[str], str]
    ) -> list[tuple[str, bytes]]:
        """``(id, value)`` of the index's ids whose key has not expired, in id order."""
        with unavailable("list registrations"):
            members: set[Any] = await self._redis.smembers(index)
            if not members:
                return []
            ids = sorted(bytes(member).decode() for member in members)
            flat = await self._live(keys=[index, *map(key_of, ids)], args=ids)
        return [(flat[i].decode(), flat[i + 1]) for i in range(0, len(flat), 2)]

    # --- attempt claims -------------------------------------------------------------------

    async def claim_attempts(
        self,
        owner: str,
        requests: Sequence[ClaimRequest],
        ttl: float,
        *,
        known_epoch: str | None = None,
    ) -> ClaimBatch:
        """One script per call (``SET … PX`` per attempt that nobody holds), timed by the
        server's clock; see :data:`_CLAIM_SCRIPT` and ``docs/protocol.md``."""
        if not owner:
            raise ValueError("a claim needs an owner")
        keys = [self._keys.claim_epoch]
        keys += [self._keys.claim(r.occurrence_id, r.attempt) for r in requests]
        args: list[str | int] = [owner, _ttl_ms(ttl), known_epoch or "", uuid4().hex]
        args += ["1" if r.careful else "0" for r in requests]
        with unavailable("claim attempts"):
            flat = await self._claim(keys=keys, args=args)
        until = int(flat[1])
        # Every attempt claimed now by ``owner`` but those the script names (one value shared).
        claims = [AttemptClaim(ClaimOutcome.CLAIMED, owner, int(flat[2]) / 1e3)] * len(requests)
        for i in range(3, len(flat), 4):
            outcome = _OUTCOMES.get(raw := bytes(flat[i + 1])) or ClaimOutcome(raw.decode())
            holder = bytes(flat[i + 2]).decode() or None
            claims[int(flat[i]) - 1] = AttemptClaim(outcome, holder, int(flat[i + 3]) / 1e3)
        return ClaimBatch(bytes(flat[0]).decode(), claims, None if until < 0 else until / 1e3)

    async def release_attempts(self, owner: str, attempts: Sequence[tuple[UUID, int]]) -> None:
        """One script per call (:data:`~rota.coordination.claim_scripts.RELEASE_CLAIMS_SCRIPT`)."""
        if not attempts:
            return
        keys = [self._keys.claim(oid, attempt) for oid, attempt in attempts]
        with unavailable("release attempt claims"):
            await self._release_claims(keys=keys, args=[owner])

    # --- wake-ups -------------------------------------------------------------------------

    async def wake(self, due: float) -> None:
        # Subscribers created before this call must see it: let them learn the stream's tail
        # (in flight on another connection) before adding to it.
        starting = [s.start for s in self._subscribers if s.start is not None]
        if starting:
            await asyncio.wait(starting)
        with unavailable("wake"):
            await self._redis.xadd(
                self._keys.wakeups,
                {b"due": repr(float(due)).encode()},
                maxlen=self._wakeup_cap,
                approximate=True,
            )

    def wakeups(self) -> _StreamWakeups[float]:
        subscriber = _StreamWakeups(self, self._keys.wakeups, _one_field(b"due", float))
        self._subscribers.add(subscriber)
        return subscriber

    async def announce(self, topic: str) -> None:
        starting = [s.start for s in self._subscribers if s.start is not None]
        if starting:  # as in :meth:`wake`: subscribers made before this call must see it
            await asyncio.wait(starting)
        with unavailable("announce"):
            await self._redis.xadd(
                self._keys.announcements,
                {b"topic": topic.encode()},
                maxlen=self._wakeup_cap,
                approximate=True,
            )

    def announcements(self) -> _StreamWakeups[str]:
        unpack = _one_field(b"topic", lambda raw: raw.decode())
        subscriber = _StreamWakeups(self, self._keys.announcements, unpack)
        self._subscribers.add(subscriber)
        return subscriber

    # --- cancellation channel -------------------------------------------------------------

    async def cancel(
        self,
        occurrence_ids: Sequence[UUID],
        reason: str | None = None,
        *,
        superseded_below: int | None = None,
    ) -> None:
        if not occurrence_ids:
            return
        starting = [s.start for s in self._subscribers if s.start is not None]
        if starting:
            await asyncio.wait(starting)
        with unavailable("send cancellations"):
            async with self._redis.pipeline(transaction=False) as pipe:
                for occurrence_id in occurrence_ids:
                    fields = {b"occurrence": str(occurrence_id).encode()}
                    if reason is not None:
                        fields[b"reason"] = reason.encode()
                    if superseded_below is not None:
                        fields[b"below"] = str(superseded_below).encode()
                    pipe.xadd(
                        self._keys.cancellations,
                        fields,  # type: ignore[arg-type]  # (dict invariance)
                        maxlen=self._wakeup_cap,
                        approximate=True,
                    )
                await pipe.execute()

    def cancellations(self) -> _StreamWakeups[Cancellation]:
        subscriber = _StreamWakeups(self, self._keys.cancellations, _unpack_cancellation)
        self._subscribers.add(subscriber)
        return subscriber

    # --- change events --------------------------------------------------------------------

    async def publish_events(self, events: Sequence[Event]) -> None:
        """One ``XADD`` per :data:`EVENTS_PER_ENTRY` events (a field ``e`` holding a JSON array
        of ``[type, payload]`` pairs, a run event's payload packed as a list of its values:
        :meth:`~rota.core.events.Event.packed`), in one pipeline; the stream keeps about
        ``event_cap`` entries."""
        if not events:
            return
        starting = [s.start for s in self._subscribers if s.start is not None]
        if starting:
            await asyncio.wait(starting)
        step = EVENTS_PER_ENTRY
        with unavailable("publish events"):
            async with self._redis.pipeline(transaction=False) as pipe:
                for i in range(0, len(events), step):
                    packed = pack_events(events[i : i + step])
                    pipe.xadd(
                        self._keys.events,
                        {_EVENTS_FIELD: packed},
                        maxlen=self._event_cap,
                        approximate=True,
                    )
                await pipe.execute()

    async def replay(self, after: str | None, limit: int = 1000) -> list[tuple[str, Event]]:
        start = None if after is None else parse_event_id(after)
        out: list[tuple[str, Event]] = []
        low = b"-" if start is None else f"{start[0]}-{start[1]}".encode()
        while len(out) < limit:
            with unavailable("replay events"):
                entries: Any = await self._redis.xrange(self._keys.events, min=low, count=100)
            for entry_id, fields in entries:
                out.extend(_unpack_events(bytes(entry_id), fields, start))
            if len(entries) < 100:
                break
            low = b"(" + bytes(entries[-1][0])
        return out[:limit]

    async def feed_horizon(self) -> str | None:
        """From ``XINFO STREAM``: more entries added than the stream holds means it trimmed
        some; the oldest kept is its first entry."""
        from redis.exceptions import ResponseError

        with unavailable("read the event stream"):
            try:
                info: Any = await self._redis.xinfo_stream(self._keys.events)
            except ResponseError:  # no such key: nothing published (or Redis lost it)
                return None
        added, length = info.get("entries-added"), info.get("length")
        first = info.get("first-entry")
        if added is None or length is None or added <= length or not first:
            return None
        return f"{bytes(first[0]).decode()}-0"

    def events(self, after: str | None = None) -> _StreamWakeups[tuple[str, Event]]:
        start = None if after is None else parse_event_id(after)

        def unpack(entry_id: bytes, fields: Any) -> list[tuple[str, Event]]:
            return _unpack_events(entry_id, fields, None)

        async def start_at() -> tuple[bytes, list[tuple[str, Event]]]:
            if start is None:
                return await self._stream_tail(self._keys.events), []
            entry = f"{start[0]}-{start[1]}".encode()
            with unavailable("replay events"):
                found: Any = await self._redis.xrange(self._keys.events, entry, entry)
            first = [] if not found else _unpack_events(entry, found[0][1], start)
            return entry, first

        subscriber = _StreamWakeups(self, self._keys.events, unpack, start_at)
        self._subscribers.add(subscriber)
        return subscriber

    async def _stream_tail(self, stream: str) -> bytes:
        """The id of the stream's last entry (``0-0`` if empty)."""
        with unavailable("read a stream"):
            last: Any = await self._redis.xrevrange(stream, count=1)
        return bytes(last[0][0]) if last else b"0-0"


_Unpacker = Callable[[bytes, Any], list[T]]
"""``unpack(entry_id, fields)`` -> the items of one stream entry (``KeyError`` or
``ValueError`` for an unreadable one)."""
_StartAt = Callable[[], Awaitable[tuple[bytes, list[T]]]]
"""Finds where a reader starts: the id after which it reads, and items to yield first."""


def _one_field(field: bytes, parse: Callable[[bytes], T]) -> _Unpacker[T]:
    def unpack(_entry_id: bytes, fields: Any) -> list[T]:
        return [parse(fields[field])]

    return unpack


def _unpack_events(entry_id: bytes, fields: Any, after: EventId | None) -> list[tuple[str, Event]]:
    """The events of one stream entry with their ids, leaving out those ``<= after``; an
    unreadable entry is logged and skipped."""
    ms, _, seq = entry_id.decode().partition("-")
    base = (int(ms), int(seq))
    try:
        pairs = orjson.loads(fields[_EVENTS_FIELD])
        events = [unpacked(str(kind), data) for kind, data in pairs]
    except (KeyError, ValueError, TypeError):
        log.warning("unreadable event entry %r", entry_id)
        return []
    out = []
    for n, event in enumerate(events):
        event_id = (*base, n)
        if after is None or event_id > after:
            out.append((format_event_id(event_id), event))
    return out


class _StreamWakeups(Generic[T]):
    """One subscriber of a stream (:meth:`RedisCoordination.wakeups`, ``cancellations``,
    ``events``): reads it from where ``start_at`` says (by default: its tail when the
    subscriber is created), on its own connection. ``aclose()`` (or the coordination's close)
    ends it, also while a read is waiting."""

    _RETRY_DELAY = 0.5

    def __init__(
        self,
        owner: RedisCoordination,
        stream: str,
        unpack: _Unpacker[T],
        start_at: _StartAt[T] | None = None,
    ) -> None:
        self._owner = owner
        self._stream = stream
        self._unpack = unpack
        self._start_at = start_at or self._tail
        self._last_id: bytes | None = None
        self._buffer: collections.deque[T] = collections.deque()
        self._closed = False
        self._client: Redis | None = None
        self._reading: asyncio.Future[None] | None = None
        self.start: asyncio.Future[None] | None = None
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop yet: the first read finds the start
        self.start = asyncio.ensure_future(self._find_start())
        self.start.add_done_callback(self._started)

    async def _tail(self) -> tuple[bytes, list[T]]:
        return await self._owner._stream_tail(self._stream), []

    def _started(self, _: object) -> None:
        self.start = None

    async def ready(self) -> None:
        """Return once the reader knows where it starts: what is published from then on
        reaches it (a subscriber told "subscribed" before that could miss an event)."""
        start = self.start
        if start is not None:
            await asyncio.shield(start)

    async def _find_start(self) -> None:
        try:
            await self._begin()
        except BackendUnavailableError as exc:
            log.warning("stream subscription could not read the stream: %s", exc)

    async def _begin(self) -> None:
        last_id, first = await self._start_at()
        self._last_id = last_id
        self._buffer.extend(first)

    def __aiter__(self) -> _StreamWakeups[T]:
        return self

    async def __anext__(self) -> T:
        while not self._buffer:
            if self._closed:
                raise StopAsyncIteration
            reading = self._reading = asyncio.ensure_future(self._fill())
            try:
                await asyncio.wait({reading})
            except asyncio.CancelledError:
                reading.cancel()
                # a read cut short may end in the driver's own error (redis-py's pool, told
                # of a connection it no longer holds): taken here, nobody else waits for it
                reading.add_done_callback(_outcome_taken)
                raise
            finally:
                self._reading = None
            if not reading.cancelled():
                reading.result()
        return self._buffer.popleft()

    async def _fill(self) -> None:
        """One read: wait for the start, then up to ``block`` for new entries. Connection
        trouble is logged and retried after a pause (the stream keeps what was sent)."""
        if self.start is not None:
            await asyncio.wait({self.start})
        try:
            if self._last_id is None:
                await self._begin()
                if self._buffer:
                    return
            await self._read()
        except BackendUnavailableError as exc:
            log.warning("stream read failed, retrying: %s", exc)
            await asyncio.sleep(self._RETRY_DELAY)

    async def _read(self) -> None:
        if self._client is None:
            self._client = self._owner._redis.client()
        stream = self._stream
        assert self._last_id is not None
        with unavailable("read a stream"):
            found: Any = await self._client.xread(
                {stream: self._last_id}, count=100, block=self._owner._block_ms
            )
        streams = found.items() if isinstance(found, dict) else found or ()  # RESP3 or RESP2
        for _, entries in streams:
            for entry_id, fields in entries:
                self._last_id = bytes(entry_id)
                try:
                    self._buffer.extend(self._unpack(self._last_id, fields))
                except (KeyError, ValueError, TypeError):
                    log.warning("unreadable entry %r in %s", fields, stream)

    async def aclose(self) -> None:
        self._closed = True
        self._owner._subscribers.discard(self)
        pending = [f for f in (self.start, self._reading) if f is not None]
        for future in pending:
            future.cancel()
        if pending:
            await asyncio.wait(pending)
        for future in pending:  # a read cut short may end in the driver's own error: seen
            _outcome_taken(future)
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()
