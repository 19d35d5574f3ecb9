-- Runs the decision of ARGV (ARGV[1] is its time argument), or a batch:
-- ARGV[1] == 'batch', then for each decision the number of its arguments
-- and the arguments. A batch replies with its decisions' replies, in order;
-- they are made one after another, at one instant, as the same calls would
-- be made one by one.
if ARGV[1] ~= 'batch' then
  set_now(ARGV[1])
  return decide(ARGV)
end
batching, written = true, {}
local out, i = {}, 2
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  local a = {}
  for j = 1, n do a[j] = ARGV[i + j] end
  set_now(a[1])
  out[#out + 1] = decide(a)
  i = i + n + 1
end
for k, w in pairs(written) do write(k, unpack(w, 1, 5)) end
return out
