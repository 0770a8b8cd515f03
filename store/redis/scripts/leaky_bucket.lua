-- leaky_bucket.lua: the leaky bucket as a queue (algorithm.LeakyBucket).
-- State: the TAT, as gcra; an admitted hit is told to wait Delay.

A[LEAKY_BUCKET] = {
  unstep = tat_kind.unstep,
  charge = tat_kind.charge,
  refund = tat_kind.refund,
  load = tat_kind.load,
  encode = tat_kind.encode,
  fresh = tat_kind.fresh,
  step = function(s, now, cost, p)
    local old = s.tat
    local tat, d = bucket_decide(old, now, cost, p)
    if d[1] == ALLOWED and cost > 0 then
      d[5] = max(old, now) - now
      s.tat = tat
      return d, true
    end
    return d, false
  end,
}
