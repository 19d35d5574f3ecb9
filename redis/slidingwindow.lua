-- Sliding window. ARGV: now, permits, op (OP_ACQUIRE, OP_REFUND: refund a
-- grant, OP_CHARGE: count permits without refusing), limit, window (us),
-- segments, then for OP_REFUND the grant's instant.
-- Segmented (segments > 0): a log of the segments that hold grants (see
-- log.lua; K[1] and K[2]), whose instants are segment starts (w /
-- segments is exact: New checks that the window is a multiple): O(log
-- segments) commands per call, where walking a ring of counts would cost
-- O(segments). Weighted (segments == 0): K[1] is "start total prev
-- window" (window, the length in us the state was counted under, is
-- missing in states written before it was recorded: the current one).
-- Same decisions as slidingwindow's model. A grant's instant (the reply's
-- extra) is one of the segment or window it was counted in.
--
-- Reconfigured to another window length, the weighted counter holds the
-- old window's estimate of the permits in the window at now, rounded up,
-- as the count of now's window of the new length, the previous one empty
-- (as slidingwindow's model.Holding), and stores that state whatever the
-- decision. The segmented form's layout is in its log (see log.lua).
--
-- Both forms are given the three keys: K[1] the weighted state, K[2] and
-- K[3] the log. Switched from one form to the other, a form that finds
-- none of its own state and the other's converts it (as memory does:
-- slidingwindow's model.Used by the old form, Holding by the new one) and
-- deletes the other's keys, so that a switch back counts nothing twice:
-- the log's permits in its window at now become the count of now's window
-- (weighted, the previous one empty); the weighted estimate at now under
-- its window, rounded up, becomes one entry in now's segment (segmented).

local function decide(K, ARGV)
  local key = K[1]
  local now, p, op, limit = NOW, tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
  local w, n = tonumber(ARGV[5]), tonumber(ARGV[6])
  if n > 0 then return log_decide({K[2], K[3], K[1]}, now, p, op, limit, w, w / n, tonumber(ARGV[7])) end

  -- Weighted two-window counter.
  local start, total, prev = 0, 0, 0
  local a, b, c, sw = load(key)
  local moved = false -- laid out by another window or form: the state is stored
  if a and sw and sw ~= w then
    -- The old window's estimate at now, rounded up: stricter.
    start, total, moved = floor_start(now, w), weighted_used(a, b, c, sw, now), true
  elseif a then
    start, total, prev = a, b, c
  else
    -- Switched from the segmented form: what its log holds at now counts
    -- in now's window, and the log is deleted.
    local x, ln = log_held(K[2], K[3], now, w)
    if ln > 0 then redis.call('DEL', K[2], K[3]) end
    if x > 0 then start, total, moved = floor_start(now, w), x, true end
  end
  if not (now >= start and now - start < w) then
    local ns = floor_start(now, w)
    if ns > start then
      if ns == start + w then prev, total = total, 0 else prev, total = 0, 0 end
      start = ns
    end
  end
  local W = w * 1000 -- float64(window ns): exact integers, rounded once
  -- The estimated permits in the sliding window ending at instant t (us),
  -- as the model computes them: float64(prev) * float64(window - elapsed)
  -- / float64(window) + float64(total), where the integer ns are exact in
  -- us and rounded once by the multiplication by 1000.
  local function weight(t)
    local e = t - start
    if e < w then return prev * ((w - e) * 1000) / W + total end
    if e < 2 * w then return total * ((2 * w - e) * 1000) / W + 0 end
    return 0
  end
  -- us until the state is initial again, saturated at FAR_US as the
  -- model's InitialAt is (check.Add).
  local function reset_after()
    if total > 0 then return min(start + 2 * w, FAR_US) - now elseif prev > 0 then return min(start + w, FAR_US) - now end
    return 0
  end
  local function remaining(x)
    local r = limit - x
    if r > 0 then return floor(r) end
    return 0
  end

  local function save() store(key, reset_after(), '%d %d %d %d', start, total, prev, w) end

  if op == OP_REFUND then -- take back a grant while its window counts
    local fs = floor_start(tonumber(ARGV[7]), w)
    if moved then
      -- Laid out by another window or form (a rollout): the estimate may
      -- hold none of the caller's grants; nothing is given back.
    elseif fs == start and total > 0 then
      total = total - min(p, total)
      moved = true
    elseif fs == start - w and prev > 0 then
      prev = prev - min(p, prev)
      moved = true
    end
    if moved then save() end
    return reply(true, remaining(weight(now)), -1, max(reset_after(), 0))
  end

  if op == OP_CHARGE then -- count p in now's window without refusing (slidingwindow's model.Charge)
    total = charged(total, p)
    save()
    return reply(true, remaining(weight(now)), -1, max(reset_after(), 0))
  end

  -- weight <= limit - want, not weight + want <= limit: the sum would
  -- round (2^53 + 1 is 2^53 in a double) and admit past a limit near 2^53.
  local want = max(p, 1)
  local granted = weight(now) <= limit - want
  local retry = -1
  if granted then
    if p > 0 then
      total = total + p
      moved = true
    end
  else
    -- Where the estimate says, to the microsecond (slidingwindow's guess).
    local guess = start + w
    if want <= limit - total and prev > 0 then
      guess = start + floor(w * (1 - (limit - total - want) / prev))
    elseif total > 0 then
      guess = start + w + floor(w * (1 - (limit - want) / total))
    end
    retry = earliest(now, min(start + 2 * w, FAR_US), guess, function(t)
      return weight(t) <= limit - want
    end) - now
  end
  if moved then save() end
  return reply(granted, remaining(weight(now)), retry, max(reset_after(), 0), granted and max(NOW, start) or 0)
end
