-- Concurrency. K[1]: sorted set of holders ("id permits", scored by the
-- instant their lease expires); K[2]: permits held. ARGV: now, permits,
-- op (OP_ACQUIRE, OP_RELEASE, OP_RENEW), limit, lease TTL (us), holder id.
-- A holder that stops renewing (a crashed process) loses its permits at expiry:
-- the expired holders are swept, at most MAX_SWEEP per run, oldest first (a
-- loop of a run is bounded whatever the limit); the rest count as held
-- until a later run sweeps them, which only ever admits less, and none of
-- them is renewed.
local MAX_SWEEP = 64

local function decide(K, ARGV)
  local set, cnt = K[1], K[2]
  local now, p, op = NOW, tonumber(ARGV[2]), ARGV[3]
  local limit, ttl, member = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6] .. ' ' .. ARGV[2]
  local held = tonumber(redis.call('GET', cnt) or '0')
  local expired = redis.call('ZRANGEBYSCORE', set, '-inf', now, 'LIMIT', 0, MAX_SWEEP)
  for _, m in ipairs(expired) do
    held = held - tonumber(sub(m, find(m, ' ', 1, true) + 1))
  end
  if #expired > 0 then redis.call('ZREMRANGEBYRANK', set, 0, #expired - 1) end

  local granted, extra = true, 0
  if op == OP_RELEASE then
    extra = redis.call('ZREM', set, member)
    if extra == 1 then held = held - p end
  elseif op == OP_RENEW then
    local due = redis.call('ZSCORE', set, member)
    if due and tonumber(due) > now then
      redis.call('ZADD', set, 'XX', now + ttl, member)
      extra = 1
    end
  elseif p > 0 and redis.call('ZSCORE', set, member) then
    -- The same acquire again (the client retried after losing the reply):
    -- the holder has its permits already.
  else
    granted = max(p, 1) <= limit - held
    if granted and p > 0 then
      redis.call('ZADD', set, now + ttl, member)
      held = held + p
    end
  end
  local last = redis.call('ZRANGE', set, -1, -1, 'WITHSCORES')
  if #last == 0 then
    redis.call('DEL', set, cnt)
    held = 0
  else
    redis.call('SET', cnt, format('%d', held))
    expire_in(tonumber(last[2]) - now, set, cnt)
  end
  return reply(granted, max(limit - held, 0), -1, 0, extra)
end
