-- gcra.lua: the generic cell rate algorithm (algorithm.GCRA) over bucket.lua.

A[GCRA] = {
  unstep = tat_kind.unstep,
  charge = tat_kind.charge,
  refund = tat_kind.refund,
  load = tat_kind.load,
  encode = tat_kind.encode,
  fresh = tat_kind.fresh,
  -- step applies cost; it returns the decision and whether state changed.
  step = function(s, now, cost, p)
    local tat, d = bucket_decide(s.tat, now, cost, p)
    if d[1] == ALLOWED and cost > 0 then
      s.tat = tat
      return d, true
    end
    return d, false
  end,
}
