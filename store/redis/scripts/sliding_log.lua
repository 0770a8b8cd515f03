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
  -- unadd takes back n units admitted at now (a refund).
  unadd = function(s, now, n, p)
    log_remove(s, now, n)
  end,
}
