-- sliding_log.lua: algorithm.SlidingLog over the log state of log.lua.

A[SLIDING_LOG] = {
  log = true,
  fresh = function(s, now, p)
    local at = log_newest(s)
    if not at then
      return 0
    end
    return at + p.window - now
  end,
  step = function(s, now, cost, p)
    log_drop(s, now - p.window)
    local d, used = log_decision(s, now, cost, p, p.window)
    local charged = false
    if d[1] == ALLOWED and cost > 0 then
      log_add(s, now, cost, nil)
      used = used + cost
      charged = true
    end
    return log_finish(s, d, used, now, p, p.window), charged
  end,
  -- charge is algorithm.ChargeSlidingLog: up to cost units at now, no more
  -- than bring the units in use to 2 × quota. They wait in s.adds like an
  -- admission.
  charge = function(s, now, cost, p)
    log_drop(s, now - p.window)
    local n = min(cost, 2 * p.quota - log_used(s))
    if n > 0 then
      log_add(s, now, n, nil)
    end
    local d, used = log_decision(s, now, 0, p, p.window)
    return log_finish(s, d, used, now, p, p.window), n > 0
  end,
  -- refund is algorithm.RefundSlidingLog, written at once: the driver saves
  -- the pending admissions first (and snapshots the key when the group may
  -- still be denied).
  refund = function(s, now, cost, p)
    log_drop(s, now - p.window)
    local before = s.u
    log_take_newest(s, cost)
    local d, used = log_decision(s, now, 0, p, p.window)
    return log_finish(s, d, used, now, p, p.window), s.u ~= before
  end,
  -- unadd takes back n units admitted at now (a cross-slot refund).
  unadd = function(s, now, n, p)
    log_remove(s, now, n)
  end,
}
