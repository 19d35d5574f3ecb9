-- Runs the decision of ARGV (ARGV[1] is its time argument), or a batch.
-- A decision's ARGV is a head (now, permits, op), the limiter's
-- parameters, then extra arguments. A batch is ARGV 'batch', the
-- head's length h, the number of parameters np, the parameters, then for
-- each decision the number of its own arguments n and those: its head and
-- extra arguments. A batch replies with its decisions' replies, in order;
-- they are made one after another, at one instant, as the same calls would
-- be made one by one.
if ARGV[1] ~= 'batch' then
  set_now(ARGV[1])
  return decide(ARGV)
end
batching, written = true, {}
local h, np = tonumber(ARGV[2]), tonumber(ARGV[3])
local out, i = {}, 4 + np
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  local a = {}
  for j = 1, h do a[j] = ARGV[i + j] end
  for j = 1, np do a[h + j] = ARGV[3 + j] end
  for j = h + 1, n do a[np + j] = ARGV[i + j] end
  set_now(a[1])
  out[#out + 1] = decide(a)
  i = i + n + 1
end
for k, w in pairs(written) do write(k, unpack(w, 1, 5)) end
return out
