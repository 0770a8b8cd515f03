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
}

