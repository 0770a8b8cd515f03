-- fixed_window.lua: algorithm.FixedWindow. State: id (window index) and cur
-- (count admitted in it), two packed doubles.

A[FIXED_WINDOW] = {
  window = true, -- a window: one.lua keeps its TTL within a window
  load = function(raw)
    if raw and #raw == 16 then
      local id, cur = unpack('<dd', raw)
      return {id = id, cur = cur, prev = 0}
    end
    return {id = 0, cur = 0, prev = 0}
  end,
  encode = function(s)
    return pack('<dd', s.id, s.cur)
  end,
  unstep = function(s, ours, cost)
    if s.id == ours.id then
      s.cur = max(s.cur - cost, 0)
    end
  end,
  fresh = function(s, now, p)
    if s.cur > 0 then
      return (s.id + 1) * p.window - now
    end
    return 0
  end,
  -- charge is algorithm.ChargeFixedWindow, refund RefundFixedWindow.
  charge = function(s, now, cost, p)
    local id, cur = s.id, s.cur
    if cost > 0 then
      local nid = max(fdiv(now, p.window), s.id)
      if nid ~= s.id then
        s.id, s.cur = nid, 0
      end
      s.cur = charge_count(s.cur, cost, p.quota)
    end
    return window_settled(A[FIXED_WINDOW], s, now, p, id, cur, s.prev)
  end,
  refund = function(s, now, cost, p)
    local id, cur = s.id, s.cur
    -- Only when now is in the stored window (RefundFixedWindow).
    if cost > 0 and fdiv(now, p.window) == s.id then
      s.cur = max(s.cur - cost, 0)
    end
    return window_settled(A[FIXED_WINDOW], s, now, p, id, cur, s.prev)
  end,
  step = function(s, now, cost, p)
    local id = max(fdiv(now, p.window), s.id)
    local cur = s.cur
    if id ~= s.id then
      cur = 0
    end
    local stop = (id + 1) * p.window - now
    local d = {ALLOWED, 0, 0, 0, 0}
    local charged = false
    if cost > p.quota then
      d[1] = TOO_HIGH
    elseif cost > 0 and cur + cost > p.quota then -- a look is allowed, even in debt
      d[1] = LIMITED
      d[4] = stop
    else
      cur = cur + cost
      charged = cost > 0
    end
    d[2] = max(p.quota - cur, 0) -- a charge may have put cur above quota
    if cur > 0 then
      d[3] = stop
    end
    if charged then
      s.id, s.cur = id, cur
    end
    return d, charged
  end,
}
