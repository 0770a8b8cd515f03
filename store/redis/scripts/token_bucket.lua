-- token_bucket.lua: algorithm.TokenBucket, in the same shape. State:
-- missing (tokens taken and not yet refilled) and last (µs up to which
-- refill has been credited), two packed doubles; the bucket is full again at
-- last + missing × interval, the TAT bucket_decide works on.

-- tokens_at puts s in the canonical form of TAT tat, unless tat is already
-- its TAT; it reports whether s changed.
local function tokens_at(s, tat, now, p)
  if p.interval == 0 or tat == s.l + s.m * p.interval then
    return false
  end
  s.m = cdiv(max(tat - now, 0), p.interval)
  s.l = tat - s.m * p.interval
  return true
end

A[TOKEN_BUCKET] = {
  load = function(raw)
    if raw and #raw == 16 then
      local m, l = unpack('<dd', raw)
      return {m = m, l = l}
    end
    return {m = 0, l = 0}
  end,
  encode = function(s)
    return pack('<dd', s.m, s.l)
  end,
  fresh = function(s, now, p)
    return s.l + s.m * p.interval - now
  end,
  -- unstep is bucket.lua's on the TAT the state implies (what the charge
  -- still holds is time, not whole tokens: a token half drained gives back
  -- its half), kept in the canonical form at rnow.
  unstep = function(s, ours, cost, p, rnow)
    local held = max(ours.l + ours.m * p.interval - rnow, 0)
    tokens_at(s, max(s.l + s.m * p.interval - min(cost * p.interval, held), 0), rnow, p)
  end,
  -- charge and refund are algorithm.ChargeTokens and RefundTokens.
  charge = function(s, now, cost, p)
    local tat, d = tat_charge(s.l + s.m * p.interval, now, cost, p)
    return d, tokens_at(s, tat, now, p)
  end,
  refund = function(s, now, cost, p)
    local tat, d = tat_refund(s.l + s.m * p.interval, now, cost, p)
    return d, tokens_at(s, tat, now, p)
  end,
  -- step is algorithm.TokenBucket: decide on the TAT the state implies,
  -- and keep the canonical form when charged.
  step = function(s, now, cost, p)
    local tat, d = bucket_decide(s.l + s.m * p.interval, now, cost, p)
    if d[1] == ALLOWED and cost > 0 then
      s.m = cdiv(tat - now, p.interval)
      s.l = tat - s.m * p.interval
      return d, true
    end
    return d, false
  end,
}
