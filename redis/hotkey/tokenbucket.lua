-- Token bucket. State: "b last held": the tokens in the bucket at last
-- (us), and the permits the live leases hold. Parameters: rate (tokens/s,
-- 0 for interval refill), burst, period (us), per period.
--
-- The live leases' permits count as still in the bucket for the burst:
-- refill stops while b + held = burst. So the bucket as a fleet sees it,
-- b plus the permits the leases have not spent, never holds more than
-- burst, gains at most the refill, and loses one token per permit spent
-- (a take's p at once, a lease's permits as the process spends them); a
-- lease that expires takes its unspent permits with it, as spent at E, and
-- one given back puts them back in b. Any order of spending conforms to
-- (burst, rate).
local rate, burst, period, per = tonumber(ARGV[13]), tonumber(ARGV[14]), tonumber(ARGV[15]), tonumber(ARGV[16])
local b, last, held = burst, NOW, 0
do
  local s = redis.call('GET', S)
  if s then b, last, held = fields(s) end
end
-- A burst lowered since the state was stored holds no more than it says,
-- as the exact script's bucket is capped at burst.
b = min(b, max(burst - held, 0))

-- The tokens the bucket gains from t0 to t1 (us), before the cap.
local function gain(t0, t1)
  if t1 <= t0 then return 0 end
  if period > 0 then return (floor_div(t1, period) - floor_div(t0, period)) * per end
  return (t1 - t0) * rate / 1e6
end

-- Refills the bucket up to the instant t, capped at burst - held.
local function advance(t)
  if t <= last then return end
  local cap = burst - held
  if b < cap then b = min(b + gain(last, t), cap) end
  last = t
end

-- The instant (us) from t at which a bucket of x tokens, refilled from t
-- without a cap, holds need; FAR_US when never.
local function filled(x, t, need)
  if x >= need then return t end
  if period > 0 then
    if per <= 0 then return FAR_US end
    return (floor_div(t, period) + ceil((need - x) / per)) * period
  end
  if rate <= 0 then return FAR_US end
  return t + ceil((need - x) * 1e6 / rate)
end

-- us from now until the bucket holds need tokens, if nothing else were
-- taken: refill with the cap rising as the live leases expire (the
-- first MAX_SWEEP of them are looked at; a hint past those).
local function wait_for(need)
  local x, t, h = b, last, held
  local ls = redis.call('ZRANGE', L, 0, MAX_SWEEP - 1, 'WITHSCORES')
  local i = 1
  while true do
    local e = FAR_US
    if ls[i + 1] then e = max(tonumber(ls[i + 1]), t) end
    if need <= burst - h then
      local at = filled(x, t, need)
      if at <= e then return max(at - NOW, 0) end
    end
    if e >= FAR_US then return FAR_US - NOW end
    if x < burst - h then x = min(x + gain(t, e), burst - h) end
    t, h = e, h - permits_of(ls[i])
    i = i + 2
  end
end

local function decide()
  sweep(function(e, h)
    advance(e)
    held = max(held - h, 0)
  end)
  advance(NOW)
  give(function(h, _, u)
    held = max(held - h, 0)
    b = min(b + u, burst - held)
  end)

  local granted, k, valid, e, retry = false, 0, 0, 0, -1
  local avail = floor(b)
  if OP == 'take' then
    local need
    k, need = sizing(avail, floor(burst - held), held, WANT)
    if k >= need then
      granted, valid, e = true, X, NOW + X
      b, held = b - k, held + (k - P)
      lease(k - P, e)
      if k == P then valid = 0 end
    else
      k, retry = 0, wait_for(need)
    end
  elseif OP == 'peek' then
    granted = avail >= 1
    if not granted then retry = wait_for(1) end
  end

  -- Initial again (full, no lease) at the latest when every lease has
  -- expired and the bucket has refilled from b after that.
  local reset = 0
  if held > 0 or b < burst then
    reset = latest_expiry() - NOW + (filled(b, 0, burst) - 0)
    if period > 0 then reset = reset + period end
    redis.call('SET', S, format('%.17g %d %d', b, last, held))
  end
  expire_in(reset, S, L)
  return {granted and 1 or 0, k, valid, e, floor(b), retry, reset}
end
