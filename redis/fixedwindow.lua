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
  local function save(n) store(key, n > 0 and wend - now or 0, '%d %d %d', start, n, w) end
  return count_decide(op, p, limit, start, wend, count, moved, tonumber(ARGV[6]), save)
end
