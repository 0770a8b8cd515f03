-- one.lua: the driver of a call whose every group is one Take (no release,
-- no action, mode 0) on a bucket or window key (token_bucket, gcra,
-- leaky_bucket, fixed_window, sliding_window) or one allotment (mode 3,
-- allot.lua): driver.lua's decide_one or allot for each op, without
-- driver.lua's closures and group parsing, with at most one TIME per call,
-- one MGET for every key and one reply string. The store concatenates
-- head.lua (the deadline guard and the MGET, shared with fast.lua:
-- min_ttl, clock, raws; a call past its deadline skips lib.lua's set-up),
-- lib.lua, the algorithm files the call needs, allot.lua when it carries
-- allotments (else a line declaring allot nil) and one.lua. (A call of
-- Takes alone runs fast.lua instead: one.lua decides calls that lease.)
--
-- ARGV: minTTL (ms), deadline (Redis TIME µs; "" for none: see guard.lua),
-- dup ("1" when a key may come more than once in the call, else ""), then
-- per op: limit ("alg:quota:window:burst:interval"), cost (an integer; an
-- allotment's spec, see allot.lua), now (µs, or "" for Redis TIME). KEYS: one per op, in order.
--
-- Reply: a one-element array holding one string of packed little-endian
-- doubles, 6 per op: now, reason, remaining, resetAfter, retryAfter, delay
-- (an allotment: now and allot's granted, remaining, ttl, reset, epoch);
-- or "sluice:expired" when the call runs after its deadline, having done
-- nothing.

-- latest holds the state (or false: none) a charge of this call left, by
-- key, when a key may come again later in the call.
local latest = ARGV[3] == '1' and {}
local limits = {}
local parts = {}
for k = 1, #KEYS do
  local ai = 1 + 3 * k
  local spec = ARGV[ai]
  local p = limits[spec]
  -- An allotment (allot.lua) has its spec, holding ':', for cost.
  local lease = allot and string.find(ARGV[ai + 1], ':', 1, true)
  if not p and not lease then
    local a, q, w, b, i = string.match(spec, '^(%d+):(%d+):(%d+):(%d+):(%d+)$')
    local alg = a and A[tonumber(a)]
    if not alg or alg.log then
      return error('sluice: one.lua: not a bucket or window limit: ' .. spec)
    end
    p = {alg = tonumber(a), quota = tonumber(q), window = tonumber(w), burst = tonumber(b), interval = tonumber(i)}
    limits[spec] = p
  end
  local now = ARGV[ai + 2]
  if now == '' then
    if not clock then
      local t = call('TIME')
      clock = tonumber(t[1]) * 1000000 + tonumber(t[2])
    end
    now = clock
  else
    now = tonumber(now)
  end
  local key = KEYS[k]
  local raw = raws[k]
  if latest and latest[key] ~= nil then
    raw = latest[key]
  end
  if lease then
    local n, rem, ttl, reset, epoch, enc = allot(key, now, spec, ARGV[ai + 1], min_ttl, raw)
    if latest and enc ~= nil then
      latest[key] = enc
    end
    parts[k] = pack('<dddddd', now, n, rem, ttl, reset, epoch)
  else
    -- driver.lua's decide_one and store_state.
    local alg = A[p.alg]
    local st = alg.load(raw)
    -- A window's expiry is its window's end (fixed_window.lua's and
    -- sliding_window.lua's fresh) while it holds a count: a charge in the
    -- same window keeps the TTL the key has (without a minTTL, which
    -- would move it).
    local keep = alg.window and min_ttl == 0 and st.cur > 0 and st.id
    local d, charged = alg.step(st, now, tonumber(ARGV[ai + 1]), p)
    if charged then
      local f = alg.fresh(st, now, p)
      local enc = false
      if keep and keep == st.id then
        enc = alg.encode(st)
        call('SET', key, enc, 'KEEPTTL')
      elseif f > 0 then
        enc = alg.encode(st)
        call('SET', key, enc, 'PX', max(cdiv(f, 1000), min_ttl))
      else
        call('DEL', key)
      end
      if latest then
        latest[key] = enc
      end
    end
    parts[k] = pack('<dddddd', now, d[1], d[2], d[3], d[4], d[5])
  end
end
return {table.concat(parts)}
