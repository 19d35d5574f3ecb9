-- Sliding log. KEYS[1]: list of "instant permits", oldest first; KEYS[2]:
-- their total. ARGV: now, permits, limit, window (us).
local function decide(ARGV)
  local log, tot = KEYS[1], KEYS[2]
  local now, p, limit, w = NOW, tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
  local total = tonumber(redis.call('GET', tot) or '0')
  local popped = false
  while true do
    local e = redis.call('LINDEX', log, 0)
    if not e then break end
    local t, n = fields(e)
    if t + w > now then break end
    redis.call('LPOP', log)
    total = total - n
    popped = true
  end
  if popped and total > 0 then redis.call('SET', tot, format('%d', total), 'KEEPTTL') end
  local granted = total + max(p, 1) <= limit
  local retry = -1
  if granted then
    if p > 0 then
      local e = redis.call('LINDEX', log, -1)
      local t, n
      if e then t, n = fields(e) end
      if t == now then
        redis.call('LSET', log, -1, format('%d %d', now, n + p))
      else
        redis.call('RPUSH', log, format('%d %d', now, p))
      end
      total = total + p
      redis.call('SET', tot, format('%d', total))
    end
  else
    local need = total + max(p, 1) - limit
    local i = 0
    while retry < 0 do
      local chunk = redis.call('LRANGE', log, i, i + 99)
      if #chunk == 0 then break end
      for _, e in ipairs(chunk) do
        local t, n = fields(e)
        need = need - n
        if need <= 0 then retry = (t + w - now) * 1000; break end
      end
      i = i + 100
    end
  end
  local reset = 0
  local newest = redis.call('LINDEX', log, -1)
  if newest then reset = fields(newest) + w - now end
  if total == 0 then redis.call('DEL', log, tot) elseif granted and p > 0 then expire_in(reset, log, tot) end
  return reply(granted, limit - total, retry, reset * 1000)
end
