-- native.lua: a group of fixed_window ops with a Charge, Refund or Reset,
-- under Options.NativeFixedWindow (native.go): the state of each key is the
-- per-window integer key the native path INCRBYs, so an action applies to
-- the same counter the native takes charge. It decides as driver.lua does
-- for such a group (algorithm.FixedWindow, ChargeFixedWindow,
-- RefundFixedWindow): all-or-nothing, each op seeing the ones before it;
-- when a take is denied nothing is written and every op reports the state
-- before its own effect. Refunds (cost > 0) and resets are PUBLISHed under
-- the key's script name (prefix + "f" + tag), as driver.lua does, so that
-- caches of denials forget them.
--
-- ARGV: now (µs, or "" for Redis TIME), minTTL (ms), margin (ms), channel
-- ("" for none), then per op: kind ("t" take, "+" charge, "-" refund, "x"
-- reset), cost, quota, window (µs), window id, announced name.
-- KEYS: per op, the per-window key of that window id.
--
-- Reply: integers: now, then per op reason, remaining, resetAfter,
-- retryAfter; or {-1, now} when now is not in the window an op's key names
-- (the store's estimate of Redis's clock was off at a window's edge): then
-- nothing was done and the store sends the group again.

local call, tonumber, floor, KEYS, ARGV = redis.call, tonumber, math.floor, KEYS, ARGV
local now = ARGV[1]
if now == '' then
  local t = call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local min_ttl, margin, channel = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local redis_clock = ARGV[1] == ''

local function fdiv(a, b)
  local q = floor(a / b)
  local r = a - q * b
  if r < 0 then
    q = q - 1
  elseif r >= b then
    q = q + 1
  end
  return q
end

local n = #KEYS
local ops = {}
for k = 1, n do
  local a = 4 + (k - 1) * 6
  local op = {kind = ARGV[a + 1], cost = tonumber(ARGV[a + 2]), q = tonumber(ARGV[a + 3]),
    w = tonumber(ARGV[a + 4]), id = tonumber(ARGV[a + 5]), name = ARGV[a + 6], key = KEYS[k]}
  if fdiv(now, op.w) ~= op.id then
    return {-1, now}
  end
  ops[k] = op
end

local cur = {}
local denied = false
local before, after, reason = {}, {}, {}
for k = 1, n do
  local op = ops[k]
  local c = cur[op.key]
  if c == nil then
    c = tonumber(call('GET', op.key) or '0')
  end
  before[k] = c
  local r = 0
  if op.kind == 't' then
    if op.cost > op.q then
      r = 2
    elseif op.cost > 0 and c + op.cost > op.q then
      r = 1
    elseif op.cost > 0 then
      c = c + op.cost
    end
  elseif op.kind == '+' then
    if op.cost > 0 then
      c = math.min(c + op.cost, 2 * op.q)
      if c < before[k] then
        c = before[k]
      end
    end
  elseif op.kind == '-' then
    if op.cost > 0 then
      c = math.max(c - op.cost, 0)
    end
  else
    c = 0
  end
  if r ~= 0 then
    denied = true
  end
  reason[k], after[k] = r, c
  cur[op.key] = c
end

local out = {now}
for k = 1, n do
  local op = ops[k]
  local s = after[k]
  if denied then
    s = before[k]
  end
  local stop = (op.id + 1) * op.w - now
  local rem = op.q - s
  if rem < 0 then
    rem = 0
  end
  local reset, retry = 0, 0
  if s > 0 then
    reset = stop
  end
  if reason[k] == 1 then
    retry = stop
  end
  out[#out + 1] = reason[k]
  out[#out + 1] = rem
  out[#out + 1] = reset
  out[#out + 1] = retry
end
if denied then
  return out
end

local wrote, items, resets = {}, {}, 0
for k = 1, n do
  local op = ops[k]
  if not wrote[op.key] then
    wrote[op.key] = true
    local c = cur[op.key]
    if op.kind == 'x' then
      -- The counter of a rule on the script path (sluice.Op.Script) is
      -- the script's key: a reset clears it too.
      call('UNLINK', op.name)
    end
    if c <= 0 then
      call('DEL', op.key)
    elseif redis_clock then
      call('SET', op.key, c, 'PXAT', floor(((op.id + 1) * op.w + 999) / 1000) + margin)
    else
      local stop = (op.id + 1) * op.w - now
      call('SET', op.key, c, 'PX', math.max(floor((stop + 999) / 1000), min_ttl))
    end
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
