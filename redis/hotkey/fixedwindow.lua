-- Fixed window. State: "start count held": the window's start (us), the
-- permits debited in it (granted, and held by its leases), and the
-- permits its live leases hold. Parameters: limit, window (us).
--
-- A lease is valid only within the window it was debited in: E is at
-- most the window's end. So every permit spent in a window was debited
-- in it, and the count of a window, at most limit, bounds what is spent
-- in it. Permits given back while their window runs leave its count; a
-- lease whose time left in the window is under the least validity holds
-- nothing (the take grants p alone, as the exact limiter would).
local limit, w = tonumber(ARGV[13]), tonumber(ARGV[14])
local start = NOW - (NOW % w)
if start > NOW then start = start - w elseif start + w <= NOW then start = start + w end
local count, held = 0, 0
do
  local s = redis.call('GET', S)
  if s then
    local st, c, h = fields(s)
    if st >= start then -- this window (or a later one, should the clock step back)
      start, count, held = st, c, h
    else -- an older window: its leases ended with it
      redis.call('ZREMRANGEBYSCORE', L, '-inf', format('%d', start))
    end
  end
end
local wend = start + w

local function decide()
  sweep(function(_, h) held = max(held - h, 0) end)
  give(function(h, e, u)
    held = max(held - h, 0)
    if e > start then count = max(count - u, 0) end -- debited in this window
  end)

  local granted, k, valid, e, retry = false, 0, 0, 0, -1
  if OP == 'take' then
    valid = min(X, wend - NOW)
    local want = P
    if valid >= MIN_VALID then want = max(P, ceil(WANT * valid / X)) end
    k = sizing(limit - count, limit - count, held, want)
    if k >= P and P > 0 then
      granted, e = true, NOW + valid
      count, held = count + k, held + (k - P)
      lease(k - P, e)
      if k == P then valid = 0 end
    else
      k, valid, retry = 0, 0, wend - NOW
    end
  elseif OP == 'peek' then
    granted = count < limit
    if not granted then retry = wend - NOW end
  end

  local reset = 0
  if count > 0 then
    reset = wend - NOW
    redis.call('SET', S, format('%d %d %d', start, count, held))
  end
  expire_in(reset, S, L)
  return {granted and 1 or 0, k, valid, e, limit - count, retry, reset}
end
