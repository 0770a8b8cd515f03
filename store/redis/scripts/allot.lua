-- allot.lua: leases allotments (sluice.AllotRequest) for store/hybrid, run
-- after lib.lua (whose helpers and codes it uses), not with driver.lua. It
-- reads and writes the same state as fixed_window.lua and gcra.lua, so an
-- allotment is quota taken exactly as a Take would take it, and ordinary
-- Takes on the key see it as spent.
--
-- KEYS[1]: the key. ARGV: minTTL (ms), now (µs, or "" for Redis TIME), alg
-- (4 fixed_window, 2 gcra), quota, window, burst, interval, want, keep,
-- split, give, epoch, lease (µs: how long a gcra grant may be spent).
-- Reply: {granted, remaining, ttl (µs), reset (µs), epoch}.

local a = ARGV
local min_ttl = tonumber(a[1])
local now
if a[2] == '' then
  local t = call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(a[2])
end
local alg, quota, window, burst, interval = tonumber(a[3]), tonumber(a[4]), tonumber(a[5]), tonumber(a[6]), tonumber(a[7])
local want, keep, split, give, epoch, lease = tonumber(a[8]), tonumber(a[9]), max(tonumber(a[10]), 1), tonumber(a[11]), tonumber(a[12]), tonumber(a[13])
local key = KEYS[1]
local raw = call('GET', key)

-- grant returns what may be granted out of avail units.
local function grant(avail)
  local g = fdiv(max(avail - keep, 0), split)
  return max(min(want, g), 0)
end

local function expire(fresh)
  if fresh > 0 then
    call('PEXPIRE', key, max(fdiv(fresh + 999, 1000), min_ttl))
  end
end

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
  local g = grant(quota - cur)
  cur = cur + g
  local stop = (id + 1) * window - now
  if g > 0 or give > 0 then
    call('SET', key, pack('<dd', id, cur))
    expire(stop)
  end
  local reset = 0
  if cur > 0 then
    reset = stop
  end
  return {g, max(quota - cur, 0), stop, reset, id} -- a charge may have put cur above quota
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
  local g = grant(rem)
  local ntat = base + g * interval
  if g > 0 or give > 0 then
    call('SET', key, pack('<d', ntat))
    expire(ntat - now)
  end
  return {g, rem - g, lease, max(ntat - now, 0), 0}
end
return error('sluice: allot: unsupported algorithm ' .. tostring(alg))
