-- bucket.lua: the arithmetic the three bucket algorithms share
-- (algorithm/bucket.go), and the TAT state of gcra and leaky_bucket: one
-- packed double, µs.

-- bucket_remaining is bucketRemaining: whole units that fit now.
local function bucket_remaining(tat, now, p)
  if p.interval == 0 then
    return 0
  end
  local r = fdiv(p.burst * p.interval - (tat - now), p.interval)
  return min(max(r, 0), p.burst)
end

-- bucket_decide is bucketDecide. It returns the TAT to store if charged and
-- the decision d = {reason, remaining, reset, retry, delay}.
local function bucket_decide(tat, now, cost, p)
  local cap = p.burst * p.interval
  local base = max(tat, now)
  if cost == 0 or cost > p.burst then
    local reason = ALLOWED
    if cost > p.burst then
      reason = TOO_HIGH
    end
    return tat, {reason, bucket_remaining(base, now, p), base - now, 0, 0}
  end
  local newtat = base + cost * p.interval
  local over = newtat - now - cap
  if over > 0 then
    return tat, {LIMITED, bucket_remaining(base, now, p), base - now, over, 0}
  end
  return newtat, {ALLOWED, bucket_remaining(newtat, now, p), newtat - now, 0, 0}
end

-- bucket_look is the decision of a look (cost 0) at TAT tat.
local function bucket_look(tat, now, p)
  local _, d = bucket_decide(tat, now, 0, p)
  return d
end

-- tat_charge is algorithm.ChargeTAT: the TAT after a charge of cost (never
-- more than 2 × burst intervals past now, nor past MAX_EXACT, nor earlier
-- than it was) and the look at it.
local function tat_charge(tat, now, cost, p)
  if cost > 0 and p.burst > 0 then
    local base = max(tat, now)
    tat = max(tat, min(base + min(cost, 2 * p.burst) * p.interval, now + 2 * p.burst * p.interval, MAX_EXACT))
  end
  return tat, bucket_look(tat, now, p)
end

-- tat_refund is algorithm.RefundTAT: the TAT after a refund of cost, never
-- before now, and the look at it.
local function tat_refund(tat, now, cost, p)
  if cost > 0 and tat > now then
    tat = max(tat - min(cost, 2 * p.burst + 1) * p.interval, now)
  end
  return tat, bucket_look(tat, now, p)
end

-- tat_apply stores tat in s and returns d and whether the TAT changed.
local function tat_apply(s, tat, d)
  local changed = tat ~= s.tat
  s.tat = tat
  return d, changed
end

local tat_kind = {
  -- load turns the stored string (or nil) into state.
  load = function(raw)
    if raw and #raw == 8 then
      return {tat = unpack('<d', raw)}
    end
    return {tat = 0}
  end,
  encode = function(s)
    return pack('<d', s.tat)
  end,
  -- fresh is how long until the state is back to a fresh key's.
  fresh = function(s, now, p)
    return s.tat - now
  end,
  -- unstep takes back a charge of cost, whose result was the state ours,
  -- from s, a state other requests changed since (so the old state cannot
  -- simply be put back): at most what the charge still holds at rnow.
  unstep = function(s, ours, cost, p, rnow)
    s.tat = s.tat - min(cost * p.interval, max(ours.tat - rnow, 0))
  end,
  -- charge and refund apply sluice.Charge and sluice.Refund; they return
  -- the decision (a look after) and whether the state changed.
  charge = function(s, now, cost, p)
    return tat_apply(s, tat_charge(s.tat, now, cost, p))
  end,
  refund = function(s, now, cost, p)
    return tat_apply(s, tat_refund(s.tat, now, cost, p))
  end,
}

