-- native.lua: a group of fixed_window and sliding_window ops with a Charge,
-- Refund or Reset, under Options.NativeFixedWindow and NativeSlidingWindow
-- (native.go): the state of each key is the per-window integer keys the
-- native path INCRBYs (a sliding window's: its window's and the previous
-- one's), so an action applies to the same counters the native takes
-- charge. It decides as driver.lua does for such a group
-- (algorithm.FixedWindow, SlidingWindow and their Charge and Refund):
-- all-or-nothing, each op seeing the ones before it; when a take is denied
-- nothing is written and every op reports the state before its own effect.
-- Refunds (cost > 0) and resets are PUBLISHed under the key's script name
-- (prefix + "f" or "s" + tag), as driver.lua does, so that caches of
-- denials forget them. Composed after lib.lua and sliding_window.lua, whose
-- helpers (fdiv, charge_count, weighted, sliding_retry) it uses.
--
-- ARGV: now (µs, or "" for Redis TIME), minTTL (ms), margin (ms), channel
-- ("" for none), then per op: kind ("t" take, "+" charge, "-" refund, "x"
-- reset), algorithm ("f" fixed, "s" sliding), cost, quota, window (µs),
-- window id, announced name.
-- KEYS: per op two: the per-window key of that window id, then (a sliding
-- window) that of the window before, or (a fixed window) the first again.
--
-- Reply: integers: now, then per op reason, remaining, resetAfter,
-- retryAfter; or {-1, now} when now is not in the window an op's key names
-- (the store's estimate of Redis's clock was off at a window's edge): then
-- nothing was done and the store sends the group again.

local KEYS, ARGV = KEYS, ARGV
local now = ARGV[1]
if now == '' then
  local t = call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local min_ttl, margin, channel = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local redis_clock = ARGV[1] == ''

local n = #KEYS / 2
local ops = {}
for k = 1, n do
  local a = 4 + (k - 1) * 7
  local op = {kind = ARGV[a + 1], sliding = ARGV[a + 2] == 's', cost = tonumber(ARGV[a + 3]),
    q = tonumber(ARGV[a + 4]), w = tonumber(ARGV[a + 5]), id = tonumber(ARGV[a + 6]),
    name = ARGV[a + 7], key = KEYS[2 * k - 1], prev = KEYS[2 * k]}
  if fdiv(now, op.w) ~= op.id then
    return {-1, now}
  end
  ops[k] = op
end

-- cur holds each key's count as the ops so far left it, orig as it was
-- read; last, the last window it is read in (its expiry).
local cur, orig, last = {}, {}, {}
local function count(key, id)
  local c = cur[key]
  if c == nil then
    c = tonumber(call('GET', key) or '0')
    cur[key], orig[key] = c, c
  end
  last[key] = id
  return c
end

local denied = false
local before, after, reason, retry = {}, {}, {}, {}
for k = 1, n do
  local op = ops[k]
  local e = now - op.id * op.w
  local c, pv = 0, 0
  if op.sliding then
    pv = count(op.prev, op.id)
    c = count(op.key, op.id + 1)
  else
    c = count(op.key, op.id)
  end
  before[k] = {c, pv}
  local r = 0
  local est = c
  if op.sliding then
    est = weighted(pv, e, op.w) + c
  end
  if op.kind == 't' then
    if op.cost > op.q then
      r = TOO_HIGH
    elseif op.cost > 0 and est + op.cost > op.q then
      r = LIMITED
      if op.sliding then
        retry[k] = sliding_retry(c, pv, e, op.cost, {quota = op.q, window = op.w})
      else
        retry[k] = (op.id + 1) * op.w - now
      end
    elseif op.cost > 0 then
      c = c + op.cost
    end
  elseif op.kind == '+' then
    if op.cost > 0 then
      -- Never below the count read: it may hold native takes' transient
      -- charges, to be taken back by DECRBY.
      c = max(charge_count(c, op.cost, op.q), c)
    end
  elseif op.kind == '-' then
    if op.cost > 0 then
      local from_cur = min(op.cost, c)
      c = c - from_cur
      if op.sliding then
        pv = pv - min(op.cost - from_cur, pv)
      end
    end
  else
    c, pv = 0, 0
  end
  if r ~= 0 then
    denied = true
  end
  reason[k], after[k] = r, {c, pv}
  cur[op.key] = c
  if op.sliding then
    cur[op.prev] = pv
  end
end

local out = {now}
for k = 1, n do
  local op = ops[k]
  local st = after[k]
  if denied then
    st = before[k]
  end
  local c, pv = st[1], st[2]
  local est, reset = c, 0
  if op.sliding then
    est = weighted(pv, now - op.id * op.w, op.w) + c
    if c > 0 then
      reset = (op.id + 2) * op.w - now
    elseif pv > 0 then
      reset = (op.id + 1) * op.w - now
    end
  elseif c > 0 then
    reset = (op.id + 1) * op.w - now
  end
  out[#out + 1] = reason[k]
  out[#out + 1] = max(op.q - est, 0)
  out[#out + 1] = reset
  out[#out + 1] = retry[k] or 0
end
if denied then
  return out
end

local wrote, items, resets = {}, {}, 0
local function write(key, id, w)
  local c = cur[key]
  if wrote[key] or c == orig[key] then
    return
  end
  wrote[key] = true
  if c <= 0 then
    call('DEL', key)
  elseif redis_clock then
    call('SET', key, c, 'PXAT', floor(((id + 1) * w + 999) / 1000) + margin)
  else
    call('SET', key, c, 'PX', max(floor(((id + 1) * w - now + 999) / 1000), min_ttl))
  end
end
for k = 1, n do
  local op = ops[k]
  if op.kind == 'x' and not wrote[op.key] then
    -- The counter of a rule on the script path (sluice.Op.Script) is
    -- the script's key: a reset clears it too.
    call('UNLINK', op.name)
  end
  write(op.key, last[op.key], op.w)
  if op.sliding then
    write(op.prev, last[op.prev], op.w)
  end
end
local seen = {}
for pass = 1, 2 do
  for k = 1, n do
    local op = ops[k]
    local want = (pass == 1 and op.kind == 'x') or (pass == 2 and op.kind == '-' and op.cost > 0)
    if want and not seen[op.name] then
      seen[op.name] = true
      items[#items + 1] = #op.name .. ':' .. op.name
      if pass == 1 then
        resets = resets + 1
      end
    end
  end
end
if #items > 0 and channel ~= '' then
  if resets > 0 then
    items[#items + 1] = 'r' .. resets
  end
  redis.pcall('PUBLISH', channel, table.concat(items))
end
return out
