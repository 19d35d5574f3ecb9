-- Local leases of pre-paid permits (package hotkey): the part every
-- algorithm's script shares, before tokenbucket.lua, fixedwindow.lua or
-- slidinglog.lua, and the end of every script (run.lua).
--
-- KEYS: the state (a string), the live leases (a sorted set), and for the
-- sliding log its log (a sorted set). A live lease is a member "id h" of
-- the leases' set, scored with its expiry E (us on the script's clock): h
-- permits debited for the process to spend until E. It leaves the set
-- when it is returned (its member removed: a return is applied at most
-- once) or once E has passed (swept, at most MAX_SWEEP per run, oldest
-- first: the rest wait for the next run and count as live until then,
-- which only ever admits less).
--
-- ARGV: now (empty: the server's TIME), op ('take', 'give' or 'peek'),
-- permits p, want (the permits the process asks for, p included), the
-- lease's expiry x (us), the least validity worth holding permits for
-- (us), the most permits all live leases may hold together, the new
-- lease's id, then the lease given back (its id, empty for none; its h,
-- its E, and u, its permits never spent), then the algorithm's
-- parameters from ARGV[13].
--
-- A take decides p permits now, for the caller, as the exact limiter
-- would; granted, it debits k >= p permits: p spent at once, and h = k - p
-- held in a new lease until E = now + validity, which the process spends
-- locally before E (its deadline, measured from the instant it sent the
-- call, falls before E whatever the round trip). Every run returns
-- {granted, k, validity (us, 0 when nothing is held), E, remaining,
-- retry-after (us, -1 unknown), reset-after (us)}.
--
-- Every loop is bounded: the sweeps by MAX_SWEEP, every other by the
-- number of arguments.
local floor, ceil, min, max, format, find = math.floor, math.ceil, math.min, math.max, string.format, string.find

local MAX_SWEEP = 64
local FAR_US = 9007199254740992

-- SERVER is the server's TIME, by which Redis expires keys; NOW is the
-- decision's instant: SERVER, or the time a test pins.
local server_time = redis.call('TIME')
local SERVER = tonumber(server_time[1]) * 1000000 + tonumber(server_time[2])
local NOW = SERVER
if ARGV[1] ~= '' then NOW = tonumber(ARGV[1]) end
local OP, P, WANT, X, MIN_VALID, MAX_HELD = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local ID, RID, RH, RE, RU = ARGV[8], ARGV[9], tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])
local S, L = KEYS[1], KEYS[2]

-- floor(a / b) for integers 0 <= a < 2^53, 0 < b.
local function floor_div(a, b)
  local q = floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end

-- The numbers of a state "a b c [d]".
local function fields(s)
  local out, i = {}, 1
  for word in string.gmatch(s, '%S+') do
    out[i] = tonumber(word)
    i = i + 1
    if i > 4 then break end
  end
  return out[1], out[2], out[3], out[4]
end

-- The permits of a member "id n" (a lease's h, a log entry's n).
local function permits_of(m)
  local _, _, n = find(m, ' (%d+)$')
  return tonumber(n)
end

local function member(id, n) return id .. ' ' .. format('%d', n) end

-- Removes the leases whose expiry has passed (at most MAX_SWEEP, oldest
-- first), calling expired(E, h) for each, in order.
local function sweep(expired)
  local ex = redis.call('ZRANGEBYSCORE', L, '-inf', format('%d', NOW), 'WITHSCORES', 'LIMIT', 0, MAX_SWEEP)
  local n = #ex / 2
  for i = 1, n do
    expired(tonumber(ex[2 * i]), permits_of(ex[2 * i - 1]))
  end
  if n > 0 then redis.call('ZREMRANGEBYRANK', L, 0, n - 1) end
end

-- Applies the lease given back, when there is one and it is still live:
-- returned(h, E, u). A lease that expired or was given back already
-- changes nothing.
local function give(returned)
  if RID == '' then return end
  if redis.call('ZREM', L, member(RID, RH)) == 1 then returned(RH, RE, min(RU, RH)) end
end

-- The permits of a take: k, the most it debits (want, within what is
-- available and what the live leases may still hold), and need, the
-- least worth a grant: p, and a quarter of want when that can ever be
-- had (within reach, the most that can become available), so that a
-- busy process over the limit asks again once a batch worth its call
-- has come back, not for every permit.
local function sizing(avail, reach, held, want)
  local cap = P + max(MAX_HELD - held, 0)
  local k = min(want, avail, cap)
  local need = max(P, min(ceil(want / 4), cap, reach))
  return k, need
end

-- Records a new lease of h permits valid until e.
local function lease(h, e)
  if h > 0 then redis.call('ZADD', L, format('%d', e), member(ID, h)) end
end

-- The latest expiry of the live leases; NOW when there is none.
local function latest_expiry()
  local top = redis.call('ZRANGE', L, -1, -1, 'WITHSCORES')
  if top[2] then return max(tonumber(top[2]), NOW) end
  return NOW
end

-- Makes the keys expire us from now, or deletes them (us <= 0: the
-- state is initial). From a pinned time behind the server's, us from the
-- server's time, where NOW + us would expire them at once (a state kept
-- longer than it needs decides as none does).
local function expire_in(us, ...)
  for _, k in ipairs({...}) do
    if us > 0 then
      redis.call('PEXPIREAT', k, format('%d', ceil((max(NOW, SERVER) + us) / 1000)))
    else
      redis.call('DEL', k)
    end
  end
end
