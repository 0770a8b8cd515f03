-- allot.lua: leases allotments (sluice.AllotRequest) for store/hybrid. It
-- defines allot, which driver.lua calls for each op of a group of mode
-- MODE_ALLOT, so that allotments travel in the same batched script calls
-- (EVALSHA, one per hash slot's batch) as Takes. It reads and writes the
-- same state as fixed_window.lua and gcra.lua, so an allotment is quota
-- taken exactly as a Take would take it, and ordinary Takes on the key see
-- it as spent.
--
-- An allotment-only batch carries no algorithm file (each function a
-- script defines costs a closure on every call): allot parses its limit
-- spec itself and needs only lib.lua.
--
-- one.lua runs allotments too: a call of one-op groups, allotments and
-- Takes on bucket and window keys, reads every key with one MGET and the
-- clock with one TIME, and passes each allotment its key's state as raw.
--
-- allot(key, now, limit, spec, min_ttl, raw): limit is the op's limit spec
-- "alg:quota:window:burst:interval" (alg 4 fixed_window or 2 gcra); spec is
-- "want:keep:split:give:epoch:lease" (lease: µs a gcra grant may be
-- spent); raw is the key's state (false: none), or nil to GET it. It
-- returns granted, remaining, ttl (µs), reset (µs), epoch, and the state it
-- wrote: the string SET, false when it deleted the key, nil when it wrote
-- nothing.
local function allot(key, now, limit, spec, min_ttl, raw)
  local a, q, wi, b, i = string.match(limit, '^(%d+):(%d+):(%d+):(%d+):(%d+)$')
  local w, k, s, g, e, l = string.match(spec, '^(%d+):(%d+):(%d+):(%d+):(%-?%d+):(%d+)$')
  if not a or not w then
    return error('sluice: allot: bad limit ' .. limit .. ' or spec ' .. spec)
  end
  local alg, quota, window, burst, interval = tonumber(a), tonumber(q), tonumber(wi), tonumber(b), tonumber(i)
  local want, keep, split, give, epoch, lease = tonumber(w), tonumber(k), max(tonumber(s), 1), tonumber(g), tonumber(e), tonumber(l)
  if raw == nil then
    raw = call('GET', key)
  end
  local n, fresh, enc

  if alg == FIXED_WINDOW then
    local id, cur = 0, 0
    if raw and #raw == 16 then
      id, cur = unpack('<dd', raw)
    end
    local nid = max(fdiv(now, window), id)
    if nid ~= id then
      id, cur = nid, 0
    elseif give > 0 and epoch == id then
      cur = max(cur - give, 0)
    end
    n = max(min(want, fdiv(max(quota - cur - keep, 0), split)), 0)
    cur = cur + n
    local stop = (id + 1) * window - now
    if n > 0 or give > 0 then
      -- (stop > 0: the window holds now)
      enc = pack('<dd', id, cur)
      call('SET', key, enc, 'PX', max(fdiv(stop + 999, 1000), min_ttl))
    end
    local reset = 0
    if cur > 0 then
      reset = stop
    end
    return n, max(quota - cur, 0), stop, reset, id, enc -- a charge may have put cur above quota
  elseif alg == GCRA then
    local tat = 0
    if raw and #raw == 8 then
      tat = unpack('<d', raw)
    end
    if give > 0 then
      tat = tat - min(give * interval, max(tat - now, 0))
    end
    local base = max(tat, now)
    local rem = 0
    if interval > 0 then
      rem = min(max(fdiv(burst * interval - (base - now), interval), 0), burst)
    end
    n = max(min(want, fdiv(max(rem - keep, 0), split)), 0)
    local ntat = base + n * interval
    if n > 0 or give > 0 then
      -- One command: the state with its TTL, or, once fresh, no key.
      fresh = ntat - now
      if fresh > 0 then
        enc = pack('<d', ntat)
        call('SET', key, enc, 'PX', max(fdiv(fresh + 999, 1000), min_ttl))
      else
        enc = false
        call('DEL', key)
      end
    end
    return n, rem - n, lease, max(ntat - now, 0), 0, enc
  end
  return error('sluice: allot: unsupported algorithm ' .. tostring(alg))
end
