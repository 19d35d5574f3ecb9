-- Shared by every script. Instants and durations are whole microseconds
-- (Redis TIME's resolution), since the Unix epoch for instants: every
-- integer up to 2^53 is exact in a Lua number, so they are exact until the
-- year 2255 (FAR_US), where every search and saturation stops, as Go's
-- check.Far does. Durations go back to Go in microseconds too. A
-- decision's time argument pins the time for tests; empty, the time comes
-- from TIME, never from a client's clock.
--
-- Written for the server's time: library functions are locals (a global
-- lookup per call costs), states are split with find rather than match, and
-- numbers bound for commands are formatted with %d (Redis would format a Lua
-- number with %.17g, which costs more).
local floor, ceil, min, max, format = math.floor, math.ceil, math.min, math.max, string.format
local find, sub = string.find, string.sub

-- check.Far in microseconds: 2^53, the latest instant a decision names.
local FAR_US = 9007199254740992
-- check.MaxLimit: the most permits a state counts after a charge.
local MAX_COUNT = 9007199254740992

-- count after a charge of p permits (check.Charged): it stops at MAX_COUNT.
local function charged(count, p) return count + min(p, max(MAX_COUNT - count, 0)) end

-- NOW is the instant of the decision being made (see batch.lua). TIME is
-- read once per script run: the decisions of a batch are made at one instant.
local NOW, server_now
local function server_time()
  if not server_now then
    local t = redis.call('TIME')
    server_now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return server_now
end
local function set_now(arg)
  if arg ~= '' then
    NOW = tonumber(arg)
    return
  end
  NOW = server_time()
end

-- a mod p in [0, p), for integers |a| <= 2^53 and 0 < p <= 2^53 (Lua's %
-- rounds a / p, which may be off by one period).
local function mod(a, p)
  local r = a % p
  if r < 0 then r = r + p elseif r >= p then r = r - p end
  return r
end

-- The start of the period of length p that holds t.
local function floor_start(t, p) return t - mod(t, p) end

-- A weighted sliding window's estimate at now of the permits in the window
-- of length sw ending at now, rounded up, from its state "start total prev"
-- (see slidingwindow.lua; an instant older than the window's start counts
-- as the start): what slidingwindow's model.Used says, which a reconfigured
-- window carries over.
local function weighted_used(start, total, prev, sw, now)
  local e, x = max(now - start, 0), 0
  if e < sw then
    x = prev * ((sw - e) * 1000) / (sw * 1000) + total
  elseif e < 2 * sw then
    x = total * ((2 * sw - e) * 1000) / (sw * 1000)
  end
  return ceil(x)
end

-- floor(a / b) for integers 0 <= a <= 2^53, 0 < b <= 2^53.
local function floor_div(a, b)
  local q = floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end

-- ceil(a / b) for integers 0 <= a < 2^53, 0 < b < 2^53.
local function ceil_div(a, b)
  local q = floor(a / b)
  if q * b < a then q = q + 1 elseif (q - 1) * b >= a then q = q - 1 end
  return q
end

-- The whole microseconds in x nanoseconds, rounded up, for a float
-- 0 <= x < 2^63 (exact: above 2^53 ns x is split in 2^32 ns units, which
-- are divided by 1000 apart).
local function us_ceil(x)
  x = ceil(x)
  if x < FAR_US then return ceil_div(x, 1000) end
  local hi = floor(x / 4294967296)
  local lo = x - hi * 4294967296
  local q = floor_div(hi, 1000)
  return q * 4294967296 + ceil_div((hi - q * 1000) * 4294967296 + lo, 1000)
end

-- The expiry, in ms since the epoch, of a state that is initial again us
-- after NOW. Redis expires keys by its own clock: with its TIME as NOW,
-- that is us from now. A test that pins the time ahead of the server's
-- keeps the state until us after its NOW; one that pins it behind keeps
-- it until us after the server's time, where its NOW + us would have
-- expired it at once. A state kept longer than it needs decides as none
-- does.
local function expiry_ms(us) return ceil_div(max(NOW, server_time()) + us, 1000) end

-- Makes the keys expire when the state is initial again, us after NOW.
local function expire_in(us, ...)
  for _, k in ipairs({...}) do
    if us > 0 then redis.call('PEXPIREAT', k, format('%d', expiry_ms(us))) else redis.call('DEL', k) end
  end
end

-- The numbers of a string of two to four numbers "a b [c [d]]" (the
-- third and fourth are optional).
local function fields(s)
  local i = find(s, ' ', 1, true)
  local j = find(s, ' ', i + 1, true)
  if not j then return tonumber(sub(s, 1, i - 1)), tonumber(sub(s, i + 1)) end
  local k = find(s, ' ', j + 1, true)
  if not k then return tonumber(sub(s, 1, i - 1)), tonumber(sub(s, i + 1, j - 1)), tonumber(sub(s, j + 1)) end
  return tonumber(sub(s, 1, i - 1)), tonumber(sub(s, i + 1, j - 1)), tonumber(sub(s, j + 1, k - 1)), tonumber(sub(s, k + 1))
end

-- A state of two to four numbers, stored as one string "a b [c [d]]", is
-- read with load and written with store. A state whose layout depends on
-- the configuration (a window's length, a bucket's refill period) records
-- it as its last number, so that a reconfigured limiter knows what it
-- reads. In a batch (see batch.lua) the latest state of each key is kept
-- here, as numbers, and written once at the end: a batch of decisions on
-- one key costs one GET, one parse, one format and one SET. A single
-- decision writes at once.
local batching, written = false, nil -- key -> {expiry ms or false (delete), format, numbers...}

-- The numbers of k's state; nothing when there is none.
local function load(k)
  local w = batching and written[k]
  if w then
    if w[1] then return w[3], w[4], w[5], w[6] end
    return
  end
  local s = redis.call('GET', k)
  if s then return fields(s) end
end

-- Writes a state: SET with its expiry in one command, or DEL when ms is false.
local function write(k, ms, fmt, a, b, c, d)
  if ms then
    redis.call('SET', k, format(fmt, a, b, c, d), 'PXAT', format('%d', ms))
  else
    redis.call('DEL', k)
  end
end

-- Stores k's state, the numbers formatted with fmt, which is initial again
-- us after NOW; it is deleted when us <= 0 (initial already).
local function store(k, us, fmt, a, b, c, d)
  local ms = us > 0 and expiry_ms(us)
  if not batching then return write(k, ms, fmt, a, b, c, d) end
  local w = written[k]
  if w then w[1], w[2], w[3], w[4], w[5], w[6] = ms, fmt, a, b, c, d else written[k] = {ms, fmt, a, b, c, d} end
end

-- The smallest t in [lo, hi] (whole microseconds) at which ok holds, for ok
-- monotone (false then true); hi when ok(hi) does not hold either. guess
-- is where to start: a bracket around it that doubles, then a bisection,
-- so ok is called at most about 4 x 53 times whatever the bounds. Go's
-- check.Earliest, step for step. Every value stays below 2^54, exact.
local function earliest(lo, hi, guess, ok)
  guess = min(max(guess, lo), hi)
  local f, t
  if ok(guess) then
    t = guess
    local step = 1
    while t > lo do
      f = t - min(step, t - lo)
      if not ok(f) then break end
      t = f
      step = min(2 * step, FAR_US)
    end
    if t == lo then return lo end
  else
    f = guess
    local step = 1
    while true do
      if f == hi then return hi end
      t = f + min(step, hi - f)
      if ok(t) then break end
      f = t
      step = min(2 * step, FAR_US)
    end
  end
  while t - f > 1 do
    local m = f + floor((t - f) / 2)
    if ok(m) then t = m else f = m end
  end
  return t
end

-- The protocol: ARGV is now, permits, op (OP_ACQUIRE, OP_WAIT, OP_CANCEL a
-- reservation, OP_REFUND a grant, OP_CHARGE permits without refusing (a
-- settlement's excess, at most MAX_COUNT), OP_RELEASE, OP_RENEW), the parameters,
-- the op's arguments. The ops' names and the refusal codes
-- (REFUSED_QUEUE_FULL, REFUSED_DEADLINE: a refused reservation's extra)
-- are declared before this file by the Go side (script.go's protocolLua),
-- which writes them once.

-- The reply: granted (0/1), remaining, retry-after us (-1 unknown),
-- reset-after us, extra (for a grant of a rate algorithm, the instant it
-- was counted at), prior (for a token bucket's reservation, the due
-- instant of the one before it: see tokenbucket.lua; 0 otherwise). A
-- RetryAfter found by earliest is the first whole microsecond at which the
-- request is granted: the exact wait rounded up to the resolution of the
-- instants. Numbers, not strings: an integral Lua number becomes a Redis
-- integer exactly.
local function reply(granted, remaining, retry_us, reset_us, extra, prior)
  return {granted and 1 or 0, remaining, retry_us, reset_us, extra or 0, prior or 0}
end

-- The decision of a count of permits in one window [start, wend) (a fixed
-- window's, a calendar quota's period), at NOW: op on p permits against
-- limit; at, for OP_REFUND, the grant's instant (a grant of another window
-- gives nothing back); OP_CHARGE counts p without refusing, over the limit
-- if need be (the models' Charge). moved says the state must be stored
-- whatever the decision (laid out by another window or period: processes
-- of two configurations during a rollout); a refund then gives nothing
-- back, since the count it finds may hold none of the caller's grants.
-- save(count) stores it.
local function count_decide(op, p, limit, start, wend, count, moved, at, save)
  if op == OP_REFUND then
    if not moved and count > 0 and at >= start and at < wend then
      count = count - min(p, count)
      moved = true
    end
    if moved then save(count) end
    return reply(true, max(limit - count, 0), -1, count > 0 and wend - NOW or 0)
  end
  if op == OP_CHARGE then
    count = charged(count, p)
    save(count)
    return reply(true, max(limit - count, 0), -1, count > 0 and wend - NOW or 0)
  end
  local granted = max(p, 1) <= limit - count -- exact, up to 2^53
  if granted and p > 0 then
    count = count + p
    moved = true
  end
  if moved then save(count) end
  local reset = 0
  if count > 0 then reset = wend - NOW end
  if granted then return reply(true, max(limit - count, 0), -1, reset, max(NOW, start)) end
  return reply(false, max(limit - count, 0), wend - NOW, reset)
end
