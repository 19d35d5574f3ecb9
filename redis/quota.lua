-- Calendar quota. K[1]: "start count end", the count of the period [start,
-- end) (us). ARGV: now, permits, op (OP_ACQUIRE, OP_REFUND: refund a
-- grant, OP_CHARGE: count permits without refusing), limit, then the boundaries b0 < b1 < b2 < b3 of the previous,
-- current and next periods around the caller's clock (the Go side computes
-- them in the quota's time zone, which Lua cannot), then for OP_REFUND the
-- grant's instant. The period is the one of the three that NOW (Redis's
-- TIME) falls in, so callers whose clocks differ from Redis's by less than
-- a period agree; NOW outside all three is an error. A grant's instant
-- (the reply's extra) is one of the period it was counted in: a state of a
-- period later than NOW's (a pinned time that went back) counts there, as
-- in quota's model.
--
-- Reconfigured to other periods, a count whose period has not ended at
-- NOW is held in NOW's period of the new configuration (as quota's
-- model.Holding), and that state is stored whatever the decision.
local function decide(K, ARGV)
  local key = K[1]
  local now, p, op, limit = NOW, tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
  local b0, b1, b2, b3 = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
  local start, pend
  if now >= b1 and now < b2 then
    start, pend = b1, b2
  elseif now >= b0 and now < b1 then
    start, pend = b0, b1
  elseif now >= b2 and now < b3 then
    start, pend = b2, b3
  else
    error(ERR_CLOCK_FAR .. ': quota: the server time ' .. format('%d', now) .. ' is outside the periods the caller sent, from ' ..
      format('%d', b0) .. ' to ' .. format('%d', b3) .. ': its clock is more than a period away from Redis\'s')
  end
  local count = 0
  local moved = false -- laid out by other periods: the state is stored
  local st, c, se = load(key)
  if st and se > now then
    if st > now or (st == start and se == pend) then
      start, pend, count = st, se, c
    else
      count, moved = c, true
    end
  end
  local function save(n) store(key, n > 0 and pend - now or 0, '%d %d %d', start, n, pend) end
  return count_decide(op, p, limit, start, pend, count, moved, tonumber(ARGV[9]), save)
end
