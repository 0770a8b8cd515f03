-- log.lua: the state sliding_log.lua and concurrency.lua share, kept so that
-- no op reads more than a bounded part of it (algorithm.SlidingLog and
-- algorithm.Concurrency over a sorted set, O(log n) per op, n its size).
--
-- One sorted set per key:
--   an entry: score At (µs, ≥ 0), member naming it. sliding_log: At, or
--     "At:N" when N > 1 (entries with the same At are merged, as in Go);
--     concurrency: the lease ID, or "ID:N" when N > 1.
--   "=ID", score −N: for a lease with N > 1, so a release finds its member.
--   "#", score −1 − U: U is the number of units the entries hold.
-- Entries have scores ≥ 0 and the others ≤ −1, so score ranges from 0 hold
-- entries only.
--
-- Costs: units in use are U (one ZSCORE), less the expired entries, which
-- are removed as they expire (each entry is read and removed once: O(log n)
-- amortized per admitted entry). RetryAfter reads at most LOG_WALK entries,
-- the newest entry is one ZREVRANGEBYSCORE, an admission one or two ZADDs,
-- a release two ZSCOREs and a ZREM. No op reads the whole set.
--
-- Pruning, releases and refunds are written at once (they change no later
-- decision, or are meant to stick when a group is denied); admissions wait
-- in s.adds until the group is committed (log_save), so that a denied group
-- leaves none behind.

local USED = '#'

-- log_parse splits a member into its head (At or lease ID) and N.
local function log_parse(m)
  local head, n = string.match(m, '^([^:]+):?(%d*)$')
  return head, tonumber(n) or 1
end

local function log_member(head, n)
  if n > 1 then
    return head .. ':' .. str(n)
  end
  return head
end

-- log_upgrade gives a key written by an earlier release (entries only) its
-- unit count and lease index: one pass over the set, once per such key.
local function log_upgrade(key, conc)
  local r = call('ZRANGE', key, 0, -1)
  local u = 0
  for i = 1, #r do
    local head, n = log_parse(r[i])
    u = u + n
    if conc and n > 1 then
      call('ZADD', key, str(-n), '=' .. head)
    end
  end
  call('ZADD', key, str(-1 - u), USED)
  return u
end

-- log_load opens the state of key: nothing is read but the unit count.
local function log_load(key, conc)
  local u = call('ZSCORE', key, USED)
  local s = {key = key, conc = conc, adds = {}, pend = 0, exists = u ~= false}
  if u then
    s.u = -1 - tonumber(u)
  elseif call('EXISTS', key) == 1 then
    s.u, s.exists = log_upgrade(key, conc), true
  else
    s.u = 0
  end
  return s
end

-- log_used is the number of units held, pending admissions included.
local function log_used(s)
  return s.u + s.pend
end

-- log_count changes the stored unit count by delta.
local function log_count(s, delta)
  s.u = s.u + delta
  s.changed = true
  call('ZADD', s.key, str(-1 - s.u), USED)
end

-- log_drop removes the entries with At ≤ t (dropThrough). Admissions made
-- in this group are never that old: they are at now or later.
local function log_drop(s, t)
  if t < 0 or (s.dropped and s.dropped >= t) then
    return
  end
  s.dropped = t
  local old = call('ZRANGEBYSCORE', s.key, 0, str(t))
  if #old == 0 then
    return
  end
  local freed, index = 0, {}
  for i = 1, #old do
    local head, n = log_parse(old[i])
    freed = freed + n
    if s.conc and n > 1 then
      index[#index + 1] = '=' .. head
    end
  end
  call('ZREMRANGEBYSCORE', s.key, 0, str(t))
  for i = 1, #index, 1000 do
    call('ZREM', s.key, tunpack(index, i, min(i + 999, #index)))
  end
  log_count(s, -freed)
  if s.u == 0 then
    s.top = false
  end
end

-- log_top is the At of the newest stored entry, or false; s.top caches it
-- (nil: unknown).
local function log_top(s)
  if s.top == nil then
    s.top = false
    local r = call('ZREVRANGEBYSCORE', s.key, '+inf', 0, 'WITHSCORES', 'LIMIT', 0, 1)
    if #r > 0 then
      s.top = tonumber(r[2])
    end
  end
  return s.top
end

-- log_newest is the At of the newest entry, pending ones included, or nil.
local function log_newest(s)
  local at = log_top(s) or nil
  for _, x in ipairs(s.adds) do
    if not at or x.at > at then
      at = x.at
    end
  end
  return at
end

-- log_free_at is freeAt: the At of the entry whose passing frees need units,
-- oldest first, reading at most need (≤ LOG_WALK) stored entries; past
-- LOG_WALK units, the newest entry's At.
local function log_free_at(s, need)
  if need > LOG_WALK then
    return log_newest(s)
  end
  local r = call('ZRANGEBYSCORE', s.key, 0, '+inf', 'WITHSCORES', 'LIMIT', 0, need)
  local e = {}
  for i = 1, #r, 2 do
    local _, n = log_parse(r[i])
    e[#e + 1] = {at = tonumber(r[i + 1]), n = n}
  end
  for _, x in ipairs(s.adds) do
    e[#e + 1] = x
  end
  table.sort(e, function(a, b) return a.at < b.at end)
  local freed = 0
  for i = 1, #e do
    freed = freed + e[i].n
    if freed >= need then
      return e[i].at
    end
  end
  return 0
end

-- log_add admits n units at At at (with lease id for concurrency) once the
-- group is committed; a sliding_log admission at an At already pending is
-- merged into it.
local function log_add(s, at, n, id)
  s.pend = s.pend + n
  if not id then
    for _, x in ipairs(s.adds) do
      if x.at == at then
        x.n = x.n + n
        return
      end
    end
  end
  s.adds[#s.adds + 1] = {at = at, n = n, id = id}
end

-- log_remove takes n units out of the stored sliding_log entry at At at (a
-- refund), as far as it still holds them.
local function log_remove(s, at, n)
  local r = call('ZRANGEBYSCORE', s.key, str(at), str(at), 'LIMIT', 0, 1)
  if #r == 0 then
    return
  end
  local head, held = log_parse(r[1])
  call('ZREM', s.key, r[1])
  if held > n then
    call('ZADD', s.key, str(at), log_member(head, held - n))
  end
  log_count(s, -min(n, held))
  s.top = nil
end

-- log_release frees the stored lease id, if it is still there.
local function log_release(s, id)
  local n = 1
  if not call('ZSCORE', s.key, id) then
    local w = call('ZSCORE', s.key, '=' .. id)
    if not w then
      return
    end
    n = -tonumber(w)
    call('ZREM', s.key, log_member(id, n), '=' .. id)
  else
    call('ZREM', s.key, id)
  end
  log_count(s, -n)
  s.top = nil
end

-- log_save writes the pending admissions and reports whether the key holds
-- entries; the caller then sets its TTL or deletes it.
local function log_save(s)
  if #s.adds == 0 then
    return s.u > 0
  end
  local top = log_top(s)
  for _, x in ipairs(s.adds) do
    local at = str(x.at)
    if x.id then
      call('ZADD', s.key, at, log_member(x.id, x.n))
      if x.n > 1 then
        call('ZADD', s.key, str(-x.n), '=' .. x.id)
      end
    else
      local n = x.n
      if top and x.at <= top then -- else no stored entry has this At
        local r = call('ZRANGEBYSCORE', s.key, at, at, 'LIMIT', 0, 1)
        if #r > 0 then
          local _, held = log_parse(r[1])
          call('ZREM', s.key, r[1])
          n = n + held
        end
      end
      call('ZADD', s.key, at, log_member(at, n))
    end
    if not top or x.at > top then
      top = x.at
    end
  end
  s.top = top
  s.adds, s.u, s.pend = {}, s.u + s.pend, 0
  s.changed = true
  call('ZADD', s.key, str(-1 - s.u), USED)
  return true
end

-- log_decision decides cost against the units in use; horizon is how long
-- an entry counts after its At (the window, or 0 for leases).
local function log_decision(s, now, cost, p, horizon)
  local used = log_used(s)
  local d = {ALLOWED, 0, 0, 0, 0}
  if cost > p.quota then
    d[1] = TOO_HIGH
  elseif used + cost > p.quota then
    d[1] = LIMITED
    d[4] = log_free_at(s, used + cost - p.quota) + horizon - now
  end
  return d, used
end

-- log_finish completes decision d: remaining and resetAfter.
local function log_finish(s, d, used, now, p, horizon)
  d[2] = p.quota - used
  local at = log_newest(s)
  if at then
    d[3] = max(at + horizon - now, 0)
  end
  return d
end
