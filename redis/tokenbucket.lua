-- Token bucket. K[1]: "tokens last horizon period" (last and horizon in
-- us; horizon, the latest due instant given to a reservation, may be
-- missing: 0; period, the refill period in us the bucket was kept under,
-- 0 for continuous refill, is missing in states written before it was
-- recorded: the current one). ARGV: now, permits, op, rate (tokens/s; 0 for interval refill),
-- burst, period (us), per period, queue limit, queue order (0 OldestFirst,
-- 1 NewestFirst), then op's argument. op: OP_ACQUIRE; OP_WAIT: acquire,
-- else reserve (argument: the most us the caller can wait, -1 for no
-- bound); OP_CANCEL: refund a cancelled reservation (arguments: its due instant,
-- and the one before it, as its reply told them); OP_REFUND: refund a grant
-- (argument: its instant). The arithmetic repeats tokenbucket's model's
-- float64 operations in the same order, on instants that are whole
-- microseconds, so decisions are the same bit for bit.
--
-- Reservations: a reservation is due at When(bucket, now, p) (the instant
-- at which Acquire would grant p), and never before the horizon: waiters
-- are served in arrival order, also after a cancel gave tokens back (the
-- horizon moves back only when the last reservation is cancelled, to the
-- due instant of the one before it). A reservation's reply tells it that
-- instant, the horizon it found (its prior), which its cancel sends back. With OldestFirst an Acquire of p > 0 before
-- the horizon is refused behind the queue (a new request never overtakes
-- waiters), with RetryAfter the instant a reservation made now would be
-- due.
--
-- Reconfigured to another refill mode or period, the bucket keeps its
-- whole tokens (rounded down), clamped to the new burst, and its horizon;
-- nothing refills for the time before the change (stricter than refilling
-- under either configuration), and the refill clock restarts at now
-- (continuous) or at the start of now's period (interval). That state is
-- stored whatever the decision, so that the clock restarts once.

-- The decision's figures, set by decide; the helpers below read them
-- (defined once per script run, not once per decision of a batch).
local key, now, rate, burst, period, per, tokens, last, horizon
local saved -- whether the decision stored the bucket

-- time.Duration(us * 1000).Seconds(), from an exact count of us >= 0:
-- float64(d / 1e9) + float64(d % 1e9) / 1e9 with d in ns.
local function seconds(us)
  local sec = floor_div(us, 1000000)
  return sec + ((us - sec * 1000000) * 1000) / 1e9
end

-- The bucket at instant t (us): tokens, and the new last (us). An instant
-- older than last refills nothing and leaves last where it is.
local function at(t)
  if period > 0 then
    if t >= last and t - last < period then return tokens, last end
    local tick = floor_start(t, period)
    local x = tokens
    if x < burst and tick > last then
      local refills = (tick - last) / period -- exact: both are multiples of period
      if refills >= ceil_div(burst - x, per) then x = burst else x = x + refills * per end
    end
    return x, max(last, tick)
  end
  if t <= last then return tokens, last end
  local x = tokens + seconds(t - last) * rate
  if x > burst then x = burst end
  return x, t
end

-- Whether a bucket left with x tokens after a take is within its means:
-- like x/time/rate, a debt repaid in under 1ns is.
local function fits(x)
  return x >= 0 or (period == 0 and ((-x) / rate) * 1e9 < 1)
end

-- The earliest instant (us), from now on, at which need tokens can be taken
-- from the bucket (tokens, last): tokenbucket's model.When, rounded up to
-- the microsecond; FAR_US when none before it. need may be 0.
local function when(need)
  local cur, l = at(now)
  cur = cur - need
  if fits(cur) then return now end
  if period > 0 then -- exact in integers
    local refills = ceil_div(ceil(-cur), per)
    if refills > floor_div(FAR_US - l, period) then return FAR_US end
    return l + refills * period
  end
  local guess = FAR_US -- where the quotient says, to the microsecond
  local d = ((-cur) / rate) * 1e9
  if d < (FAR_US - l) * 1000 then guess = l + floor(d / 1000) end
  return earliest(now, FAR_US, guess, function(t)
    local x = at(t)
    return fits(x - need)
  end)
end

-- us from now until the bucket left with x tokens (at l) is full again,
-- rounded up (tokenbucket's resetAfter, in us).
local function reset_after(x, l)
  local missing = burst - x
  if missing <= 0 then return 0 end
  if period > 0 then -- InitialAt, saturated at FAR_US
    local refills = ceil_div(burst - floor(x), per)
    if refills > floor_div(FAR_US - l, period) then return FAR_US - now end
    return l + refills * period - now
  end
  local ns = missing * (1e9 / rate)
  local left = (FAR_US - l) * 1000
  if ns > left then ns = left end
  return us_ceil(ns) + l - now
end

-- Stores the bucket x (at l) with the horizon h: it expires once it is
-- full and no reservation is outstanding.
local function save(x, l, h)
  store(key, max(reset_after(x, l), h - now), '%.17g %d %d %d', x, l, h, period)
  saved = true
end

local function decide_bucket(K, ARGV)
  key, now = K[1], NOW
  local p, op = tonumber(ARGV[2]), ARGV[3]
  rate, burst = tonumber(ARGV[4]), tonumber(ARGV[5])
  period, per = tonumber(ARGV[6]), tonumber(ARGV[7])
  local fifo, arg = tonumber(ARGV[9]) == 0, tonumber(ARGV[10])

  tokens, last, horizon = burst, 0, 0
  local a, b, c, sp = load(key)
  if a then tokens, last, horizon = a, b, c or 0 end
  if a and sp and sp ~= period then -- kept under another refill
    tokens = min(floor(tokens), burst)
    if period > 0 then last = floor_start(now, period) else last = now end
    saved = false
  end

  local cur, l = at(now)

  if op == OP_REFUND then -- refund a grant made at instant arg (tokenbucket's model.Refund)
    -- Up to what refilled from arg to last may have been lost to the burst
    -- had the grant not been made: held back. From last to now the loss is
    -- replayed exactly: the credit goes in before that refill clamps.
    local credit = p
    if period > 0 then
      local tick = floor_start(arg, period)
      if last > tick then credit = credit - (last - tick) / period * per end
    elseif last > arg then
      credit = credit - seconds(last - arg) * rate
    end
    if credit > 0 then tokens = min(tokens + credit, burst) end
    local x, l = at(now)
    save(x, l, horizon)
    return reply(true, max(0, floor(x)), -1, reset_after(x, l), 0)
  end

  if op == OP_CHARGE then -- take p tokens without refusing (tokenbucket's model.Charge)
    -- Into debt if need be, never more than MAX_COUNT tokens short of full.
    local x, lowest = cur - p, burst - MAX_COUNT
    if x <= lowest then x = min(cur, lowest) end
    save(x, l, horizon)
    return reply(true, max(0, floor(x)), -1, reset_after(x, l), 0)
  end

  if op == OP_CANCEL then -- refund a cancelled reservation (arg: its due instant): the bucket is in debt, nothing was lost
    -- The horizon stays while waiters reserved after the cancelled one may
    -- sleep: they keep the due instants they were given, in their own
    -- processes, which no script can wake earlier, and a newcomer still
    -- waits behind them. (Lowering it to when the remaining debt is repaid
    -- let a newcomer overtake a sleeping waiter once a middle reservation
    -- had been cancelled too.) The last reservation's due is the horizon:
    -- cancelled, it moves back to the due of the reservation before it,
    -- its prior (past when there is none left: the tokens come back to
    -- whoever asks after it). A prior cancelled since stays the horizon:
    -- stricter, and when the debt left is repaid may come before the dues
    -- of the reservations made behind one cancelled earlier.
    -- (A reservation made before a Reset is not told apart: its cancel
    -- gives its tokens back to the bucket the Reset filled, as a refund
    -- does: see control.Reset.)
    local x = min(cur + p, burst)
    local prior = tonumber(ARGV[11])
    if arg > 0 and arg == horizon and prior then horizon = min(horizon, prior) end
    save(x, l, horizon)
    return reply(true, max(0, floor(x)), -1, reset_after(x, l), 0)
  end

  local rem = max(0, floor(cur))
  local behind = p > 0 and fifo and now < horizon -- waiters are due later
  local want = max(p, 1)
  local after = cur - want
  if not behind and fits(after) then
    if p > 0 then
      cur = after
      save(cur, l, horizon)
    end
    return reply(true, max(0, floor(cur)), -1, reset_after(cur, l), NOW)
  end

  local due = when(want)
  if behind or (op == OP_WAIT and p > 0) then due = max(due, horizon) end
  if op ~= OP_WAIT or p == 0 then -- refusal, with the exact wait
    return reply(false, rem, due - now, reset_after(cur, l))
  end

  -- Reserve: the bucket goes into debt, bounded by the queue limit, and
  -- the reservation is due at due, which becomes the horizon. More than
  -- the burst is never reserved (the client checks it, but a Reconfigure
  -- may lower the burst meanwhile).
  local qlimit = tonumber(ARGV[8])
  after = cur - p
  if p > burst or p > qlimit or -after > qlimit or due >= FAR_US then
    return reply(false, rem, due - now, reset_after(cur, l), REFUSED_QUEUE_FULL)
  end
  if arg >= 0 and due - now > arg then
    return reply(false, rem, due - now, reset_after(cur, l), REFUSED_DEADLINE)
  end
  local prior = horizon
  save(after, l, due)
  return reply(true, 0, due - now, reset_after(after, l), due, prior)
end

local function decide(K, ARGV)
  saved = nil
  local r = decide_bucket(K, ARGV)
  if saved == false then save(tokens, last, horizon) end
  return r
end
