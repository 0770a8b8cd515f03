-- concurrency.lua: algorithm.Concurrency and algorithm.Release over the log
-- state of log.lua. An entry is a lease: At is its expiry (µs), the member
-- names it by its ID (a decimal uint64 chosen by the store).

-- conc_held reports whether lease is stored in s and still unexpired at
-- now; an expired entry of that ID is released first, so that it can be
-- taken again without counting twice.
local function conc_held(s, now, lease)
  local at = call('ZSCORE', s.key, lease)
  if not at then
    local w = call('ZSCORE', s.key, '=' .. lease)
    if not w then
      return false
    end
    at = call('ZSCORE', s.key, log_member(lease, -tonumber(w)))
    if not at then
      return false
    end
  end
  if tonumber(at) > now then
    return true
  end
  log_release(s, lease)
  return false
end

local function conc_step(s, now, cost, p, lease)
  log_drop(s, now)
  if cost > 0 and lease and conc_held(s, now, lease) then
    -- a chosen lease still held: a retried acquire, admitted as a look
    local d, used = log_decision(s, now, 0, p, 0)
    return log_finish(s, d, used, now, p, 0), false
  end
  local d, used = log_decision(s, now, cost, p, 0)
  local charged = false
  if d[1] == ALLOWED and cost > 0 then
    log_add(s, now + p.window, cost, lease)
    used = used + cost
    charged = true
  end
  return log_finish(s, d, used, now, p, 0), charged
end

-- conc_release frees lease (if still held) and reports the state as a look.
local function conc_release(s, now, p, lease)
  log_release(s, lease)
  return conc_step(s, now, 0, p, nil)
end

A[CONCURRENCY] = {
  log = true,
  conc = true,
  fresh = function(s, now, p)
    local at = log_newest(s)
    if not at then
      return 0
    end
    return at - now
  end,
  step = conc_step,
  release = conc_release,
  -- unadd takes back the lease an acquire added (a refund).
  unadd = function(s, now, n, p, lease)
    log_release(s, lease)
  end,
}
