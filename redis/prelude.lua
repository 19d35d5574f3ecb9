-- Shared by every script. Instants are microseconds since the Unix epoch
-- (Redis TIME's resolution; exact in a Lua number until the year 2255);
-- durations returned to Go are nanoseconds. ARGV[1] pins the time for tests;
-- empty, the time comes from TIME, never from a client's clock.
local function now_us()
  if ARGV[1] ~= '' then return tonumber(ARGV[1]) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Integers print in full (%d is 64-bit in Redis's Lua); floats with 17
-- digits, so they read back exactly.
local function int(x) return string.format('%d', x) end
local function flt(x) return string.format('%.17g', x) end

-- The start of the period of length p that holds t (exact for integers < 2^53).
local function floor_start(t, p)
  local r = t % p
  if r < 0 then r = r + p elseif r >= p then r = r - p end
  return t - r
end

-- ceil(a / b) for integers a >= 0, b > 0.
local function ceil_div(a, b)
  local q = math.floor(a / b)
  if q * b < a then q = q + 1 elseif (q - 1) * b >= a then q = q - 1 end
  return q
end

local NOW = now_us()

-- Makes the keys expire when the state is initial again, us after NOW. The
-- expiry is an absolute instant on the script's clock, so it also holds
-- when tests pin the time (with Redis's TIME it is the same as PEXPIRE).
local function expire_in(us, ...)
  for _, k in ipairs({...}) do
    if us > 0 then redis.call('PEXPIREAT', k, ceil_div(NOW + us, 1000)) else redis.call('DEL', k) end
  end
end

-- Stores a string state that is initial again us after NOW: SET with its
-- expiry in one command, or DEL when it is initial already.
local function set_until(k, v, us)
  if us > 0 then redis.call('SET', k, v, 'PXAT', ceil_div(NOW + us, 1000)) else redis.call('DEL', k) end
end

-- The smallest offset in [lo, hi] at which ok holds, for ok monotone and
-- true at hi, starting from guess: the same answer as Go's check.Earliest.
local function earliest(lo, hi, guess, ok)
  guess = math.min(math.max(guess, lo), hi)
  local f, t
  if ok(guess) then
    t, f = guess, guess - 1
    local step = 1
    while f >= lo and ok(f) do
      t = f
      f = math.max(t - step, lo - 1)
      step = step * 2
    end
    if f < lo then f = lo - 1 end
  else
    f, t = guess, guess + 1
    local step = 1
    while t < hi and not ok(t) do
      f = t
      t = math.min(f + step, hi)
      step = step * 2
    end
    if t > hi then t = hi end
  end
  while t - f > 1 do
    local m = f + math.floor((t - f) / 2)
    if ok(m) then t = m else f = m end
  end
  return t
end

-- The reply: granted (0/1), remaining, retry-after ns (-1 unknown), reset-after ns, extra.
-- RetryAfter is rounded up to the microsecond, the resolution of the
-- instants: waiting it makes the same request succeed.
-- Numbers, not strings: an integral Lua number becomes a Redis integer exactly.
local function reply(granted, remaining, retry_ns, reset_ns, extra)
  if retry_ns > 0 then retry_ns = ceil_div(retry_ns, 1000) * 1000 end
  return {granted and 1 or 0, remaining, retry_ns, reset_ns, extra or 0}
end
