-- Sliding window. ARGV: now, permits, limit, window (us), segments.
-- Segmented (segments > 0): KEYS[1] is a hash: s = newest segment's start,
-- t = total, c<i> = count of ring slot i. Weighted (segments == 0): KEYS[1]
-- is "start total prev". Same arithmetic as slidingwindow.Model.
local function decide(ARGV)
  local key = KEYS[1]
  local now, p, limit = NOW, tonumber(ARGV[2]), tonumber(ARGV[3])
  local w, n = tonumber(ARGV[4]), tonumber(ARGV[5])
  local want = max(p, 1)

  if n > 0 then
    local seg = w / n
    local h = redis.call('HGETALL', key)
    local st = {}
    for i = 1, #h, 2 do st[h[i]] = tonumber(h[i + 1]) end
    local start, total = st.s or 0, st.t or 0
    local function slot(t) return format('c%d', (t / seg) % n) end
    local function count(t) return st[slot(t)] or 0 end
    if not (now >= start and now - start < seg) then
      local ns = floor_start(now, seg)
      if ns > start then
        if (ns - start) / seg >= n then
          st, total = {}, 0
          redis.call('DEL', key)
        else
          local t = start + seg
          while t <= ns do
            total = total - count(t)
            st[slot(t)] = nil
            redis.call('HDEL', key, slot(t))
            t = t + seg
          end
          if total > 0 then
            redis.call('HSET', key, 's', format('%d', ns), 't', format('%d', total))
          else
            redis.call('DEL', key)
          end
        end
        start = ns
      end
    end
    local granted = total + want <= limit
    local retry = -1
    if granted then
      if p > 0 then
        total = total + p
        st[slot(start)] = count(start) + p
        redis.call('HSET', key, 's', format('%d', start), 't', format('%d', total), slot(start), format('%d', st[slot(start)]))
      end
    else
      local need = total + want - limit
      local t = start - (n - 1) * seg
      while t <= start do
        need = need - count(t)
        if need <= 0 then retry = (t + w - now) * 1000; break end
        t = t + seg
      end
    end
    local reset = 0
    local t = start
    while t > start - w do
      if count(t) ~= 0 then reset = t + w - now; break end
      t = t - seg
    end
    if p > 0 and granted then expire_in(reset, key) end
    return reply(granted, limit - total, retry, max(reset, 0) * 1000)
  end

  -- Weighted two-window counter.
  local start, total, prev = 0, 0, 0
  local a, b, c = load(key)
  if a then start, total, prev = a, b, c end
  if not (now >= start and now - start < w) then
    local ns = floor_start(now, w)
    if ns > start then
      if ns == start + w then prev, total = total, 0 else prev, total = 0, 0 end
      start = ns
    end
  end
  local W = w * 1000
  -- The estimated permits in the sliding window ending off ns after now.
  local function weight(off)
    local e = (now - start) * 1000 + off
    if e < W then return prev * (W - e) / W + total end
    if e < 2 * W then return total * (W - (e - W)) / W + 0 end
    return 0
  end
  local granted = weight(0) + want <= limit
  local retry = -1
  if granted then
    if p > 0 then total = total + p end
  else
    retry = earliest(0, (start + 2 * w - now) * 1000, 0, function(off)
      return weight(off) + want <= limit
    end)
  end
  local reset = 0
  if total > 0 then reset = start + 2 * w - now elseif prev > 0 then reset = start + w - now end
  if granted and p > 0 then store(key, reset, '%d %d %d', start, total, prev) end
  local rem = limit - weight(0)
  if rem > 0 then rem = floor(rem) else rem = 0 end
  return reply(granted, rem, retry, max(reset, 0) * 1000)
end
