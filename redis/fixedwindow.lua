-- Fixed window. KEYS[1]: "start count". ARGV: now, permits, limit, window (us).
local function decide(ARGV)
  local key = KEYS[1]
  local now, p, limit, w = NOW, tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
  local start, count = floor_start(now, w), 0
  local st, c = load(key)
  if st and st >= start then start, count = st, c end
  local wend = start + w
  local granted = count + max(p, 1) <= limit
  if granted and p > 0 then
    count = count + p
    store(key, wend - now, '%d %d', start, count)
  end
  local reset = 0
  if count > 0 then reset = (wend - now) * 1000 end
  return reply(granted, limit - count, granted and -1 or (wend - now) * 1000, reset)
end
