-- token_bucket.lua: algorithm.TokenBucket. State: missing (tokens taken and
-- not yet refilled) and last (µs up to which refill has been credited), two
-- packed doubles.

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
  unstep = function(s, ours, cost, p, rnow)
    local held = fdiv(max(ours.l + ours.m * p.interval - rnow, 0), p.interval)
    s.m = max(s.m - min(cost, held), 0)
  end,
  step = function(s, now, cost, p)
    local m, l = s.m, s.l
    if m > 0 and p.interval > 0 and now - l > 0 then
      local n = fdiv(now - l, p.interval)
      if n > 0 then
        if n >= m then
          m = 0
        else
          m = m - n
          l = l + n * p.interval
        end
      end
    end
    if m == 0 then
      l = max(l, now)
    end
    local _, d = bucket_decide(l + m * p.interval, now, cost, p)
    if d[1] == ALLOWED and cost > 0 then
      s.m, s.l = m + cost, l
      return d, true
    end
    return d, false
  end,
}
