"""The Lua scripts of the Redis claim memory (:class:`~rota.coordination.redis.RedisCoordination`'s
attempt claims; ``docs/protocol.md``): claiming a batch of attempts, and giving claims up."""

__all__ = ["CLAIM_SCRIPT", "RELEASE_CLAIMS_SCRIPT"]

# KEYS: the claim epoch hash, then one claim key per attempt. ARGV: owner, ttl (ms), the epoch
# token the caller knew ('' if none), a new token (used if the epoch is missing), then one
# careful flag ('1'/'0') per attempt. A claim is ``{claimed at ms}:{owner}`` (owner '' when
# unknown). Returns the epoch token, the end of the uncertain window in ms (-1: none), the
# server time in ms, then (position of the attempt from 1, outcome, owner, claimed at ms) for
# each attempt *not* claimed now by the owner: a batch whose attempts are all new (nearly
# every one) answers three values, not three per attempt. A new attempt costs one command
# (``SET … NX PX``); only one already claimed is read.
CLAIM_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local owner, ttl, known = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local epoch = redis.call('HMGET', KEYS[1], 'token', 'since', 'lost')
local token, since, lost = epoch[1], tonumber(epoch[2]), epoch[3] == '1'
if not token then
  token, since, lost = ARGV[4], now, false
  redis.call('HSET', KEYS[1], 'token', token, 'since', string.format('%.0f', now), 'lost', '0')
end
if known ~= '' and known ~= token and not lost then
  lost = true
  redis.call('HSET', KEYS[1], 'lost', '1')
end
local uncertain = lost and now < since + ttl
local out = {token, -1, now}
if lost then out[2] = since + ttl end
local stamp = string.format('%.0f:', now)
local claim = stamp .. owner
for i = 2, #KEYS do
  local careful = uncertain and ARGV[i + 3] == '1'
  if redis.call('SET', KEYS[i], careful and stamp or claim, 'NX', 'PX', ttl) then
    if careful then
      out[#out + 1] = i - 1
      out[#out + 1] = 'uncertain'
      out[#out + 1] = ''
      out[#out + 1] = now
    end
  else
    local at, holder = string.match(redis.call('GET', KEYS[i]), '^(%d+):(.*)$')
    out[#out + 1] = i - 1
    if holder == owner then
      redis.call('PEXPIRE', KEYS[i], ttl)
      out[#out + 1] = 'owned'
    else
      out[#out + 1] = 'taken'
    end
    out[#out + 1] = holder
    out[#out + 1] = tonumber(at)
  end
end
return out
"""

# KEYS: one claim key per attempt. ARGV: the owner. Deletes each claim the owner holds; a claim
# another holds (or none) is left alone. Returns how many were deleted.
RELEASE_CLAIMS_SCRIPT = """
local owner, n = ARGV[1], 0
for i = 1, #KEYS do
  local value = redis.call('GET', KEYS[i])
  if value then
    local holder = string.match(value, '^%d+:(.*)$')
    if holder == owner then
      redis.call('DEL', KEYS[i])
      n = n + 1
    end
  end
end
return n
"""
