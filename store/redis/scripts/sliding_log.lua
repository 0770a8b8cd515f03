-- sliding_log.lua: algorithm.SlidingLog over the log state of log.lua.

A[6] = {
  log = true,
  fresh = function(s, now, p)
    local n = #s.e
    if n == 0 then
      return 0
    end
    return s.e[n].at + p.window - now
  end,
  step = function(s, now, cost, p)
    log_drop(s, now - p.window)
    local d, used = log_decision(s, now, cost, p, p.window)
    local charged = false
    if d[1] == ALLOWED and cost > 0 then
      log_insert(s, {at = now, n = cost})
      used = used + cost
      charged = true
    end
    d[2] = p.quota - used
    local n = #s.e
    if n > 0 then
      d[3] = max(s.e[n].at + p.window - now, 0)
    end
    return d, charged
  end,
}
