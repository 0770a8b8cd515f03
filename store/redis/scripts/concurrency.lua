-- concurrency.lua: algorithm.Concurrency and algorithm.Release over the log
-- state of sliding_log.lua. An entry is a lease: At is its expiry (µs), the
-- member names it by its ID (a decimal uint64 chosen by the store).

local function conc_step(s, now, cost, p, lease)
  log_drop(s, now)
  local d, used = log_decision(s, now, cost, p, 0)
  local charged = false
  if d[1] == ALLOWED and cost > 0 then
    log_insert(s, {at = now + p.window, n = cost, id = lease})
    used = used + cost
    charged = true
  end
  d[2] = p.quota - used
  local n = #s.e
  if n > 0 then
    d[3] = max(s.e[n].at - now, 0)
  end
  return d, charged
end

-- conc_release frees lease (if still held) and reports the state as a look.
local function conc_release(s, now, p, lease)
  local e = s.e
  for i = 1, #e do
    if e[i].id == lease then
      s.cmds[#s.cmds + 1] = {'rem', e[i].m}
      table.remove(e, i)
      break
    end
  end
  return conc_step(s, now, 0, p, nil)
end

A[7] = {
  log = true,
  conc = true,
  fresh = function(s, now, p)
    local n = #s.e
    if n == 0 then
      return 0
    end
    return s.e[n].at - now
  end,
  step = conc_step,
}
