-- Runs the decision of ARGV on KEYS, or a batch. decide(K, ARGV) makes one
-- decision on the keys K: ARGV is a head (now, permits, op; now is the
-- time argument), the limiter's parameters, then extra arguments.
--
-- A batch carries decisions of one or more limiters of this algorithm, all
-- on one server (in a Cluster, one hash slot), their keys in KEYS in order.
-- ARGV is 'batch', the head's length h, then groups of limiters that share
-- their parameters: the number of parameters np and those, the number of
-- limiters nl, and for each limiter the number of its keys nk, the number
-- of its decisions nd, and for each decision the number n >= h of its own
-- arguments and those (its head and extra arguments). A batch replies with
-- its decisions' replies, in order; they are made one after another, at
-- one instant, as the same calls would be made one by one. A decision that
-- fails (a key of another type, say) replies its error and leaves the
-- others be. Every count is checked against the arguments and keys left
-- (a malformed batch is an error before anything is decided past it), and
-- every step moves past at least one argument, so the loops end within
-- #ARGV steps.
if ARGV[1] ~= 'batch' then
  set_now(ARGV[1])
  return decide(KEYS, ARGV)
end

-- The count at ARGV[i], an integer in [least, most].
local function count(i, least, most)
  local n = tonumber(ARGV[i])
  if not n or n < least or n > most or n ~= floor(n) then error('limitkit: malformed batch at argument ' .. i) end
  return n
end

batching, written = true, {}
local h = count(2, 1, #ARGV)
local out, i, k = {}, 3, 0
while i <= #ARGV do
  local np = count(i, 0, #ARGV - i)
  local params = i -- parameter j is ARGV[params + j]
  local nl = count(params + np + 1, 1, #ARGV)
  i = params + np + 2
  -- A decision's arguments, in one table the group's decisions share:
  -- the parameters are copied once, as numbers (every script reads them
  -- with tonumber, which then parses nothing), a decision's own arguments
  -- over the last one's (what is left of the last one's past them
  -- cleared). A new table per decision cost 2.7 us of server time per
  -- decision, reusing it 2.15, the parameters as numbers 2.0
  -- (BenchmarkBatchServerTime in coalesce_test.go).
  local a, last = {}, h
  for j = 1, np do a[h + j] = tonumber(ARGV[params + j]) or ARGV[params + j] end
  for _ = 1, nl do
    local nk, nd = count(i, 1, #KEYS - k), count(i + 1, 1, #ARGV)
    local K = {}
    for j = 1, nk do K[j] = KEYS[k + j] end
    k = k + nk
    i = i + 2
    for _ = 1, nd do
      local n = count(i, h, #ARGV - i)
      for j = 1, h do a[j] = ARGV[i + j] end
      for j = h + 1, n do a[np + j] = ARGV[i + j] end
      for j = n + 1, last do a[np + j] = nil end
      last = n
      set_now(a[1])
      local ok, r = pcall(decide, K, a)
      if not ok then r = redis.error_reply(type(r) == 'table' and r.err or tostring(r)) end
      out[#out + 1] = r
      i = i + n + 1
    end
  end
end
for key, w in pairs(written) do write(key, unpack(w, 1, 6)) end
return out
