-- Shared by every script. Instants are microseconds since the Unix epoch
-- (Redis TIME's resolution; exact in a Lua number until the year 2255);
-- durations returned to Go are nanoseconds. A decision's time argument pins
-- the time for tests; empty, the time comes from TIME, never from a
-- client's clock.
--
-- Written for the server's time: library functions are locals (a global
-- lookup per call costs), states are split with find rather than match, and
-- numbers bound for commands are formatted with %d (Redis would format a Lua
-- number with %.17g, which costs more).
local floor, min, max, format = math.floor, math.min, math.max, string.format
local find, sub = string.find, string.sub

-- NOW is the instant of the decision being made (see batch.lua). TIME is
-- read once per script run: the decisions of a batch are made at one instant.
local NOW, server_now
local function set_now(arg)
  if arg ~= '' then
    NOW = tonumber(arg)
    return
  end
  if not server_now then
    local t = redis.call('TIME')
    server_now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  NOW = server_now
end

-- The start of the period of length p that holds t (exact for integers < 2^53).
local function floor_start(t, p)
  local r = t % p
  if r < 0 then r = r + p elseif r >= p then r = r - p end
  return t - r
end

-- ceil(a / b) for integers a >= 0, b > 0.
local function ceil_div(a, b)
  local q = floor(a / b)
  if q * b < a then q = q + 1 elseif (q - 1) * b >= a then q = q - 1 end
  return q
end

-- The expiry, in ms since the epoch, of a state that is initial again us
-- after NOW. It is an absolute instant on the script's clock, so it also
-- holds when tests pin the time (with Redis's TIME it is the same as a
-- relative expiry).
local function expiry_ms(us) return ceil_div(NOW + us, 1000) end

-- Makes the keys expire when the state is initial again, us after NOW.
local function expire_in(us, ...)
  for _, k in ipairs({...}) do
    if us > 0 then redis.call('PEXPIREAT', k, format('%d', expiry_ms(us))) else redis.call('DEL', k) end
  end
end

-- The numbers of a string "a b" or "a b c" (a third field is optional).
local function fields(s)
  local i = find(s, ' ', 1, true)
  local j = find(s, ' ', i + 1, true)
  if j then return tonumber(sub(s, 1, i - 1)), tonumber(sub(s, i + 1, j - 1)), tonumber(sub(s, j + 1)) end
  return tonumber(sub(s, 1, i - 1)), tonumber(sub(s, i + 1))
end

-- A state of two or three numbers, stored as one string "a b [c]", is read
-- with load and written with store. In a batch (see batch.lua) the latest
-- state of each key is kept here, as numbers, and written once at the end:
-- a batch of decisions on one key costs one GET, one parse, one format and
-- one SET. A single decision writes at once.
local batching, written = false, nil -- key -> {expiry ms or false (delete), format, numbers...}

-- The numbers of k's state; nothing when there is none.
local function load(k)
  local w = batching and written[k]
  if w then
    if w[1] then return w[3], w[4], w[5] end
    return
  end
  local s = redis.call('GET', k)
  if s then return fields(s) end
end

-- Writes a state: SET with its expiry in one command, or DEL when ms is false.
local function write(k, ms, fmt, a, b, c)
  if ms then
    redis.call('SET', k, format(fmt, a, b, c), 'PXAT', format('%d', ms))
  else
    redis.call('DEL', k)
  end
end

-- Stores k's state, the numbers formatted with fmt, which is initial again
-- us after NOW; it is deleted when us <= 0 (initial already).
local function store(k, us, fmt, a, b, c)
  local ms = us > 0 and expiry_ms(us)
  if not batching then return write(k, ms, fmt, a, b, c) end
  local w = written[k]
  if w then w[1], w[2], w[3], w[4], w[5] = ms, fmt, a, b, c else written[k] = {ms, fmt, a, b, c} end
end

-- The smallest offset in [lo, hi] at which ok holds, for ok monotone and
-- true at hi, starting from guess: the same answer as Go's check.Earliest.
local function earliest(lo, hi, guess, ok)
  guess = min(max(guess, lo), hi)
  local f, t
  if ok(guess) then
    t, f = guess, guess - 1
    local step = 1
    while f >= lo and ok(f) do
      t = f
      f = max(t - step, lo - 1)
      step = step * 2
    end
    if f < lo then f = lo - 1 end
  else
    f, t = guess, guess + 1
    local step = 1
    while t < hi and not ok(t) do
      f = t
      t = min(f + step, hi)
      step = step * 2
    end
    if t > hi then t = hi end
  end
  while t - f > 1 do
    local m = f + floor((t - f) / 2)
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
