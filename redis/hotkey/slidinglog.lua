-- Sliding log. State: "sum held": the permits of the log's entries, and
-- those the live leases hold. The log (KEYS[3]) holds entries "id n"
-- scored with their instant; an entry counts from when it is written
-- until its instant + window, when it leaves. Parameters: limit, window
-- (us).
--
-- A take's p are logged at now, as the exact limiter logs a grant; the
-- permits of its lease at the lease's expiry E, the latest instant the
-- process may spend them: counted from the debit on, they occupy every
-- window that any of their real spends could. A lease given back is
-- logged again at now (its spends all came before), with the permits it
-- spent. So the entries counted at any instant hold every permit spent in
-- the window ending there, and a take is granted only when they leave room
-- for it: at most limit in any window.
local limit, w = tonumber(ARGV[13]), tonumber(ARGV[14])
local G = KEYS[3]
local sum, held = 0, 0
do
  local s = redis.call('GET', S)
  if s then sum, held = fields(s) end
end

local function decide()
  -- Entries that left the window, at most MAX_SWEEP of them (the rest
  -- count until the next run: less is admitted, never more).
  local gone = redis.call('ZRANGEBYSCORE', G, '-inf', format('%d', NOW - w), 'LIMIT', 0, MAX_SWEEP)
  for i = 1, #gone do sum = sum - permits_of(gone[i]) end
  if #gone > 0 then redis.call('ZREMRANGEBYRANK', G, 0, #gone - 1) end
  sum = max(sum, 0)
  sweep(function(_, h) held = max(held - h, 0) end)
  give(function(h, e, u)
    held = max(held - h, 0)
    if redis.call('ZREM', G, member(RID, h)) == 1 then
      if h - u > 0 then redis.call('ZADD', G, format('%d', min(e, NOW)), member(RID, h - u)) end
      sum = max(sum - u, 0)
    end
  end)

  -- us from now until need permits are free, if nothing else were
  -- taken: when the oldest entries that free them leave (the first
  -- MAX_SWEEP are looked at; a hint past those).
  local function wait_for(need)
    local free = limit - sum
    local es = redis.call('ZRANGE', G, 0, MAX_SWEEP - 1, 'WITHSCORES')
    local t = NOW
    for i = 1, #es, 2 do
      t = tonumber(es[i + 1]) + w
      free = free + permits_of(es[i])
      if free >= need then break end
    end
    return max(t - NOW, 0)
  end

  local granted, k, valid, e, retry = false, 0, 0, 0, -1
  if OP == 'take' then
    local need
    k, need = sizing(limit - sum, limit, held, WANT)
    if k >= need then
      granted, valid, e = true, X, NOW + X
      sum, held = sum + k, held + (k - P)
      redis.call('ZADD', G, format('%d', NOW), member(ID .. '*', P))
      if k > P then redis.call('ZADD', G, format('%d', e), member(ID, k - P)) end
      lease(k - P, e)
      if k == P then valid = 0 end
    else
      k, retry = 0, wait_for(need)
    end
  elseif OP == 'peek' then
    granted = sum < limit
    if not granted then retry = wait_for(1) end
  end

  -- Initial again once the newest entry has left.
  local reset = 0
  if sum > 0 then
    local top = redis.call('ZRANGE', G, -1, -1, 'WITHSCORES')
    if top[2] then reset = max(tonumber(top[2]) + w - NOW, 1) end
  end
  if reset > 0 then
    redis.call('SET', S, format('%d %d', sum, held))
    reset = max(reset, latest_expiry() - NOW)
  end
  expire_in(reset, S, L, G)
  return {granted and 1 or 0, k, valid, e, limit - sum, retry, reset}
end
