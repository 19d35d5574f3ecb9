-- Token bucket. KEYS[1]: "tokens last". ARGV: now, permits, op, rate (tokens/s;
-- 0 for interval refill), burst, period (us), per period, queue limit,
-- max wait (ns; -1 for none). op: 'a' acquire, 'w' wait (acquire, else
-- reserve), 'f' refund. The arithmetic repeats tokenbucket.Model's float64
-- operations in the same order, so decisions are the same bit for bit.
local FAR = 4611686018427387903 -- check.Far, in ns

-- The decision's figures, set by decide; the helpers below read them
-- (defined once per script run, not once per decision of a batch).
local key, now, rate, burst, period, per, tokens, last

-- time.Duration(ns).Seconds()
local function seconds(ns)
  local sec = floor(ns / 1e9)
  if sec * 1e9 > ns then sec = sec - 1 elseif (sec + 1) * 1e9 <= ns then sec = sec + 1 end
  return sec + (ns - sec * 1e9) / 1e9
end

-- The bucket at now (us) plus off (ns): tokens, and the new last (us).
local function at(off)
  if period > 0 then
    if now >= last and now - last < period then return tokens, last end
    local tick = floor_start(now, period)
    local t = tokens
    if t < burst and tick > last then
      local refills = (tick - last) / period
      if refills >= ceil_div(burst - t, per) then t = burst else t = t + refills * per end
    end
    return t, max(last, tick)
  end
  local l = min(last, now)
  local t = tokens + seconds((now - l) * 1000 + off) * rate
  if t > burst then t = burst end
  return t, now
end

local function fits(t)
  return t >= 0 or (period == 0 and ((-t) / rate) * 1e9 < 1)
end

-- ns from now until a bucket left with t tokens (at tick l) is out of debt.
local function due(t, l)
  if t >= 0 then return 0 end
  if period > 0 then return (l + ceil_div(math.ceil(-t), per) * period - now) * 1000 end
  local d = ((-t) / rate) * 1e9
  if d >= FAR then return FAR end
  return floor(d)
end

local function reset_after(t, l)
  local missing = burst - t
  if missing <= 0 then return 0 end
  if period > 0 then return (l + ceil_div(burst - floor(t), per) * period - now) * 1000 end
  local x = min(missing * (1e9 / rate), FAR)
  local r = floor(x)
  if r < x then r = r + 1 end
  return r
end

-- Stores the bucket t (at tick l), whose reset_after is reset (ns).
local function save(t, l, reset)
  store(key, ceil_div(reset, 1000), '%.17g %d', t, l)
end

local function decide(ARGV)
  key, now = KEYS[1], NOW
  local p, op = tonumber(ARGV[2]), ARGV[3]
  rate, burst = tonumber(ARGV[4]), tonumber(ARGV[5])
  period, per = tonumber(ARGV[6]), tonumber(ARGV[7])

  tokens, last = burst, 0
  local a, b = load(key)
  if a then tokens, last = a, b end

  local cur, l = at(0)

  if op == 'f' then -- refund a cancelled reservation
    local t = min(cur + p, burst)
    save(t, l, reset_after(t, l))
    return reply(true, max(0, floor(t)), -1, 0)
  end

  local want = max(p, 1)
  local after = cur - want
  if fits(after) then
    if p > 0 then cur = after end
    local reset = reset_after(cur, l)
    if p > 0 then save(cur, l, reset) end
    return reply(true, max(0, floor(cur)), -1, reset)
  end

  local rem = max(0, floor(cur))

  if op == 'w' and p > 0 then
    local qlimit, maxwait = tonumber(ARGV[8]), tonumber(ARGV[9])
    -- Reserve: the bucket goes into debt, bounded by the queue limit.
    local wait = due(after, l)
    if p > qlimit or -after > qlimit then
      return reply(false, rem, wait, reset_after(cur, l), 2)
    end
    if maxwait >= 0 and wait > maxwait then
      return reply(false, rem, wait, reset_after(cur, l), 3)
    end
    local reset = reset_after(after, l)
    save(after, l, reset)
    return reply(true, 0, wait, reset, 1)
  end

  -- Refusal: the exact wait, found on the same predicate as the Go model.
  local retry
  if period > 0 then
    retry = due(after, l)
  else
    retry = earliest(0, FAR - now * 1000, due(after, l), function(off)
      local t = at(off)
      return fits(t - want)
    end)
  end
  return reply(false, rem, retry, reset_after(cur, l))
end
