-- Sliding log (see log.lua for the keys). ARGV: now, permits, op (OP_ACQUIRE,
-- OP_REFUND: refund a grant, OP_CHARGE: record permits without refusing),
-- limit, window (us), then for OP_REFUND the
-- grant's instant. Same decisions as slidinglog's model: a grant at an
-- instant older than the newest entry's is recorded at the newest entry's,
-- and RetryAfter is the instant the oldest entries needed leave the window.
local function decide(K, ARGV)
  return log_decide(K, NOW, tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), 0, tonumber(ARGV[6]))
end
