-- sliding_window.lua: algorithm.SlidingWindow. State: id, cur, prev, three
-- packed doubles.
-- weighted and first_fit do the same double operations in the same order as
-- the Go code, so both round identically.

local function weighted(prev, e, w)
  if prev == 0 then
    return 0
  end
  return ceil(prev * (w - e) / w)
end

local function first_fit(prev, r, lo, w)
  local x = w - floor(r * w / prev)
  x = min(max(x, lo), w - 1)
  while x > lo and weighted(prev, x - 1, w) <= r do
    x = x - 1
  end
  while weighted(prev, x, w) > r do
    x = x + 1
  end
  return x
end

local function sliding_retry(cur, prev, e, cost, p)
  local w = p.window
  local r = p.quota - cur - cost
  if r >= 1 and prev > 0 then
    return first_fit(prev, r, e, w) - e
  end
  if cur == 0 then
    return w - e
  end
  r = p.quota - cost
  if r >= 1 then
    return w + first_fit(cur, r, 0, w) - e
  end
  return 2 * w - e
end

-- slide_roll moves s to the window of now, as the step does.
local function slide_roll(s, now, p)
  local id = max(fdiv(now, p.window), s.id)
  if id == s.id + 1 then
    s.id, s.cur, s.prev = id, 0, s.cur
  elseif id ~= s.id then
    s.id, s.cur, s.prev = id, 0, 0
  end
end

A[SLIDING_WINDOW] = {
  window = true, -- a window: one.lua keeps its TTL within a window
  load = function(raw)
    if raw and #raw == 24 then
      local id, cur, prev = unpack('<ddd', raw)
      return {id = id, cur = cur, prev = prev}
    end
    return {id = 0, cur = 0, prev = 0}
  end,
  encode = function(s)
    return pack('<ddd', s.id, s.cur, s.prev)
  end,
  unstep = function(s, ours, cost)
    if s.id == ours.id then
      s.cur = max(s.cur - cost, 0)
    end
  end,
  fresh = function(s, now, p)
    if s.cur > 0 then
      return (s.id + 2) * p.window - now
    elseif s.prev > 0 then
      return (s.id + 1) * p.window - now
    end
    return 0
  end,
  -- charge is algorithm.ChargeSlidingWindow, refund RefundSlidingWindow
  -- (from the current window's count first, then the previous one's; s is
  -- left unrolled when nothing is given back).
  charge = function(s, now, cost, p)
    local id, cur, prev = s.id, s.cur, s.prev
    if cost > 0 then
      slide_roll(s, now, p)
      s.cur = charge_count(s.cur, cost, p.quota)
    end
    return window_settled(A[SLIDING_WINDOW], s, now, p, id, cur, prev)
  end,
  refund = function(s, now, cost, p)
    local id, cur, prev = s.id, s.cur, s.prev
    if cost > 0 then
      slide_roll(s, now, p)
      local from_cur = min(cost, s.cur)
      local from_prev = min(cost - from_cur, s.prev)
      if from_cur + from_prev > 0 then
        s.cur, s.prev = s.cur - from_cur, s.prev - from_prev
      else
        s.id, s.cur, s.prev = id, cur, prev
      end
    end
    return window_settled(A[SLIDING_WINDOW], s, now, p, id, cur, prev)
  end,
  step = function(s, now, cost, p)
    local id = max(fdiv(now, p.window), s.id)
    local cur, prev = s.cur, s.prev
    if id == s.id + 1 then
      cur, prev = 0, s.cur
    elseif id ~= s.id then
      cur, prev = 0, 0
    end
    local e = max(now - id * p.window, 0)
    local est = weighted(prev, e, p.window) + cur
    local d = {ALLOWED, 0, 0, 0, 0}
    local charged = false
    if cost > p.quota then
      d[1] = TOO_HIGH
    elseif cost > 0 and est + cost > p.quota then -- a look is allowed, even in debt
      d[1] = LIMITED
      d[4] = sliding_retry(cur, prev, e, cost, p)
    else
      cur = cur + cost
      est = est + cost
      charged = cost > 0
    end
    d[2] = max(p.quota - est, 0)
    if cur > 0 then
      d[3] = (id + 2) * p.window - now
    elseif prev > 0 then
      d[3] = (id + 1) * p.window - now
    end
    if charged then
      s.id, s.cur, s.prev = id, cur, prev
    end
    return d, charged
  end,
}
