-- Fixed window. K[1]: "start count window" (window, the length in us the
-- state was counted under, is missing in states written before it was
-- recorded: the current one). ARGV: now, permits, op (OP_ACQUIRE, OP_REFUND:
-- refund a grant, OP_CHARGE: count permits without refusing), limit,
-- window (us), then for OP_REFUND the grant's instant. A
-- grant's instant (the reply's extra) is one of the window it was counted
-- in: an instant older than the state's window counts in the state's
-- window, as in fixedwindow's model.
--
-- Reconfigured to another window length, a count whose window has not
-- ended at now is held in now's window of the new length (as
-- fixedwindow's model.Holding), and that state is stored whatever the
-- decision: the count is never dropped while its window runs.
local function decide(K, ARGV)
  local key = K[1]
  local now, p, op, limit, w = NOW, tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
  local start, count = floor_start(now, w), 0
  local st, c, sw = load(key)
  local moved = false -- laid out by another window: the state is stored
  if st and sw and sw ~= w then
    moved = true
    if st + sw > now then count = c end
  elseif st and st >= start then
    start, count = st, c
  end
  local wend = start + w
  local function save() store(key, count > 0 and wend - now or 0, '%d %d %d', start, count, w) end
  if op == OP_REFUND then -- take back a grant while its window is the current one
    if count > 0 and floor_start(tonumber(ARGV[6]), w) == start then
      count = count - min(p, count)
      moved = true
    end
    if moved then save() end
    return reply(true, max(limit - count, 0), -1, count > 0 and wend - now or 0)
  end
  if op == OP_CHARGE then -- count p without refusing, over the limit if need be (fixedwindow's model.Charge)
    count = count + min(p, max(MAX_COUNT - count, 0))
    save()
    return reply(true, max(limit - count, 0), -1, count > 0 and wend - now or 0)
  end
  local granted = max(p, 1) <= limit - count -- exact, up to 2^53
  if granted and p > 0 then
    count = count + p
    moved = true
  end
  if moved then save() end
  local reset = 0
  if count > 0 then reset = wend - now end
  if granted then return reply(true, max(limit - count, 0), -1, reset, max(NOW, start)) end
  return reply(false, max(limit - count, 0), wend - now, reset)
end
