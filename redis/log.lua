-- A time-ordered log of grants, shared by the sliding log and the
-- segmented sliding window (a sliding log whose instants are segment
-- starts: a grant counts in the newest segment seen, and leaves the window
-- with it). K[1]: list of entries "instant cum", oldest first, one per
-- instant that holds grants, where cum is the running total of the permits
-- granted up to and including the entry, modulo 2^53 so that it stays
-- exact (only differences are read). K[2]: "base start": the running
-- total before the oldest entry, and (segmented) the start of the newest
-- segment seen; missing: 0 0; segmented, then the segment length and the
-- window (us) the entries were recorded under (missing in states written
-- before they were: the current ones). The permits in the window are
-- cum(newest) - base. Both keys expire with the newest entry.
--
-- Reconfigured, the entries stay: they leave the window at instant + the
-- new window, which is when the new configuration would drop a grant at
-- that instant (a sliding log's grants, and a segmented window's when the
-- segment length is the same). A change of segment length merges what the
-- old window holds at now into one entry in now's new segment (see
-- relaid below).
--
-- Every call costs O(log entries) commands: the entries that left the
-- window and a refusal's entry are found by binary search over LINDEX,
-- and dropped with one LTRIM. Every stored entry holds at least one
-- permit, so the running totals increase along the list: an entry's
-- difference to base is in [1, 2^53), the newest's in [1, 2^53], where 0
-- can only mean 2^53.

-- A refund rewrites the entries after the one it changes; past this many,
-- it does nothing (the grant's permits come back with time).
local MAX_REWRITE = 128

-- The permits a segmented log (keys log, meta) holds at now: those of its
-- entries that have not left the window it was recorded under (meta's, or
-- w when missing), as slidingwindow's model.Used, and its entries. O(log
-- entries) commands.
local function log_held(log, meta, now, w)
  local n = redis.call('LLEN', log)
  if n == 0 then return 0, 0 end
  local base, mw = 0, nil
  local m = redis.call('GET', meta)
  if m then
    local _
    base, _, _, mw = fields(m)
  end
  local dw = mw or w
  local function entry(i) return fields(redis.call('LINDEX', log, i)) end
  local lo, hi = 0, n -- the oldest entry still in the window
  while lo < hi do
    local i = floor((lo + hi) / 2)
    if entry(i) + dw > now then hi = i else lo = i + 1 end
  end
  if lo == n then return 0, n end
  local before = base
  if lo > 0 then
    local _, c = entry(lo - 1)
    before = c
  end
  local _, cn = entry(-1)
  local d = cn - before
  if d <= 0 then d = d + FAR_US end -- modulo 2^53; the newest holds at least one
  return d, n
end

-- Decides permits p at now on a log whose entries leave the window w
-- (us) after their instant; seg > 0: instants are starts of segments of
-- length seg. OP_ACQUIRE acquires; OP_REFUND takes back p permits granted at the
-- instant arg (a grant's reply extra: the instant it was recorded at);
-- OP_CHARGE records p permits without refusing, over the limit if need be.
local function log_decide(K, now, p, op, limit, w, seg, arg)
  local log, meta = K[1], K[2]
  local n = redis.call('LLEN', log)
  local base, start, tn, cn = 0, 0, nil, nil -- tn, cn: the newest entry
  local dirty = false -- base or start changed: meta is written
  local function entry(i) return fields(redis.call('LINDEX', log, i)) end
  -- c - base: the permits up to the entry whose running total is c
  -- (newest: that entry is the newest).
  local function upto(c, newest)
    local d = c - base
    if d < 0 then d = d + FAR_US end
    if d == 0 and newest then return FAR_US end
    return d
  end
  -- c plus q permits, modulo 2^53 (exact: c < 2^53, q <= 2^53).
  local function plus(c, q)
    if q >= FAR_US - c then return c - (FAR_US - q) end
    return c + q
  end
  -- The smallest i in [lo, hi) at which ok(i) holds, hi if none; ok is
  -- false then true along the list.
  local function search(lo, hi, ok)
    while lo < hi do
      local m = floor((lo + hi) / 2)
      if ok(m) then hi = m else lo = m + 1 end
    end
    return lo
  end

  local relaid = false -- segmented, laid out by another segment length
  if n == 0 and K[3] then
    -- Switched from the weighted form (K[3], see slidingwindow.lua): its
    -- estimate at now, rounded up, is held in one entry in now's segment
    -- (as slidingwindow's model.Holding), and its state is deleted.
    local a, b, c, sw = load(K[3])
    if a then
      local x = weighted_used(a, b, c, sw or w, now)
      store(K[3], 0, '%d')
      if x > 0 then
        tn, cn = floor_start(now, seg), plus(0, x)
        redis.call('RPUSH', log, format('%d %d', tn, cn))
        n, start, dirty = 1, tn, true
      end
    end
  end
  if n > 0 and not dirty then
    local m = redis.call('GET', meta)
    local ms, mw
    if m then base, start, ms, mw = fields(m) end
    tn, cn = entry(-1)
    local dw = w -- the window the entries leave by at now
    if seg > 0 and ms and mw and ms ~= seg then relaid, dw = true, mw end
    if entry(0) + dw <= now then -- entries left the window: drop them
      local k = search(1, n, function(i) return entry(i) + dw > now end)
      if k == n then
        redis.call('DEL', log, meta)
        n, base, start = 0, 0, 0
      else
        local _, c = entry(k - 1)
        base, dirty = c, true
        redis.call('LTRIM', log, k, -1)
        n = n - k
      end
    end
    if relaid and n > 0 then
      -- The entries' instants are starts of segments of another length:
      -- a grant may have been made up to one old segment after its
      -- entry's instant, so the entries could leave the window of the
      -- new segments sooner than that grant would. What the old window
      -- holds at now is held in one entry, in now's new segment (as
      -- slidingwindow's model.Holding), O(1) commands.
      tn = max(floor_start(now, seg), tn)
      redis.call('DEL', log)
      redis.call('RPUSH', log, format('%d %d', tn, cn))
      n, start = 1, tn
    end
    dirty = dirty or relaid
  end
  -- Where a grant now is recorded: at now, or at the newest entry's
  -- instant when now is older (the log stays in order, never admitting
  -- more); segmented: in the newest segment seen.
  local at = now
  if seg > 0 then
    if n > 0 and tn > start then start = tn end -- (a lost start: the newest entry's)
    at = floor_start(now, seg)
    if at > start then
      start = at
      dirty = dirty or n > 0
    end
    at = start
  elseif n > 0 and tn > now then
    at = tn
  end
  local total = 0
  if n > 0 then total = upto(cn, true) end

  -- Records q permits at at: in the newest entry when it is at at.
  local function push(q)
    if n > 0 and tn == at then
      cn = plus(cn, q)
      redis.call('LSET', log, -1, format('%d %d', at, cn))
    else
      cn = plus(n > 0 and cn or base, q)
      redis.call('RPUSH', log, format('%d %d', at, cn))
      n, tn = n + 1, at
    end
    total, dirty = total + q, true
  end

  local granted, retry = true, -1
  if op == OP_CHARGE then -- record p without refusing, the total at most MAX_COUNT (timelog's Charge)
    local q = min(p, max(MAX_COUNT - total, 0))
    if q > 0 then push(q) end
  elseif op == OP_REFUND then -- take back a grant, from the entry it was recorded in
    local i = search(0, n, function(i) return entry(i) >= arg end)
    -- An entry at another instant than the grant's is another grant's.
    if i < n and n - i <= MAX_REWRITE and entry(i) == arg then
      local tail = redis.call('LRANGE', log, i, -1)
      local before = 0 -- the permits up to entry i - 1
      if i > 0 then
        local _, c = entry(i - 1)
        before = upto(c, false)
      end
      local _, ci = fields(tail[1])
      local has = upto(ci, i == n - 1) - before -- entry i's permits
      local q = min(p, has)
      local kept, m = {}, 0
      for j = 1, #tail do
        local t, c = fields(tail[j])
        if j > 1 or q < has then -- entry i goes when it is left empty
          m = m + 1
          kept[m] = format('%d %d', t, plus(c, FAR_US - q))
          tn, cn = t, plus(c, FAR_US - q)
        end
      end
      total, n = total - q, i + m
      if i > 0 then redis.call('LTRIM', log, 0, i - 1) else redis.call('DEL', log) end
      if m > 0 then
        redis.call('RPUSH', log, unpack(kept, 1, m))
      elseif n > 0 then
        tn, cn = entry(-1)
      end
      dirty = true
    end
  else
    local want = max(p, 1)
    local need = want - (limit - total) -- exact, up to 2^53
    if need > 0 then
      granted = false
      -- The oldest entries whose permits, once they leave, make room
      -- (the newest holds them all when none before it does).
      local i = search(0, n - 1, function(i)
        local _, c = entry(i)
        return upto(c, false) >= need
      end)
      retry = entry(i) + w - now
    elseif p > 0 then
      push(p)
    end
  end

  local reset = 0
  if n > 0 then reset = tn + w - now end
  if dirty then
    if n == 0 then
      redis.call('DEL', log, meta)
    else
      local ms = format('%d', expiry_ms(reset))
      local m = format('%d %d', base, start)
      if seg > 0 then m = format('%d %d %d %d', base, start, seg, w) end
      redis.call('SET', meta, m, 'PXAT', ms)
      redis.call('PEXPIREAT', log, ms)
    end
  end
  return reply(granted, max(limit - total, 0), retry, reset, granted and at or 0)
end
