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
--   "%", score −1 − W: W is the number of entries with N > 1 (absent: 0).
--   "<", score −1 − T: entries with At ≤ T have expired but may still be
--     in the set (absent: none).
-- Entries have scores ≥ 0 and the others ≤ −1, so score ranges from 0 hold
-- entries only.
--
-- Costs: U, W and T are one ZMSCORE. Expired entries are counted with one
-- ZCOUNT; while no entry holds more than one unit (W = 0) that count is their
-- units, and at most LOG_PRUNE of them are removed per call, so a key whose
-- entries expire all at once costs no more than any other (the rest stay
-- behind T until later calls or the key's TTL take them). With W > 0 the
-- expired entries are read and removed at once: each entry once, O(log n)
-- amortized per admitted entry. RetryAfter reads at most LOG_WALK entries,
-- the newest entry is one ZREVRANGEBYSCORE, an admission one or two ZADDs,
-- a release two ZSCOREs and a ZREM. No op reads the whole set.
--
-- Pruning, releases and refunds are written at once (they change no later
-- decision, or are meant to stick when a group is denied); admissions wait
-- in s.adds until the group is committed (log_save), so that a denied group
-- leaves none behind.

local USED, WEIGHTED, MARK = '#', '%', '<'
local LOG_PRUNE = 256

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
-- unit count, weighted count and lease index: one pass over the set, once
-- per such key. It returns U and W.
local function log_upgrade(key, conc)
  local r = call('ZRANGE', key, 0, -1)
  local u, w = 0, 0
  for i = 1, #r do
    local head, n = log_parse(r[i])
    u = u + n
    if n > 1 then
      w = w + 1
      if conc then
        call('ZADD', key, str(-n), '=' .. head)
      end
    end
  end
  call('ZADD', key, str(-1 - u), USED, str(-1 - w), WEIGHTED)
  return u, w
end

-- log_load opens the state of key: nothing is read but U, W and T.
local function log_load(key, conc)
  local m = call('ZMSCORE', key, USED, WEIGHTED, MARK)
  local s = {key = key, conc = conc, adds = {}, pend = 0, stale = 0, exists = m[1] ~= false}
  if m[1] then
    s.u, s.w = -1 - tonumber(m[1]), m[2] and -1 - tonumber(m[2]) or 0
    s.mark = m[3] and -1 - tonumber(m[3])
  elseif call('EXISTS', key) == 1 then
    s.u, s.w = log_upgrade(key, conc)
    s.exists = true
  else
    s.u, s.w = 0, 0
  end
  return s
end

-- log_used is the number of units held, pending admissions included.
local function log_used(s)
  return s.u - s.stale + s.pend
end

-- log_count changes the stored unit count by du and the weighted count by dw.
local function log_count(s, du, dw)
  s.u, s.w = s.u + du, s.w + dw
  s.changed = true
  if dw == 0 then
    call('ZADD', s.key, str(-1 - s.u), USED)
  else
    call('ZADD', s.key, str(-1 - s.u), USED, str(-1 - s.w), WEIGHTED)
  end
end

-- log_gone accounts for n units of an entry at At at leaving the set: if it
-- had expired already, its units no longer count as stale.
local function log_gone(s, at, n)
  if s.dropped and at <= s.dropped then
    s.stale = s.stale - n
  end
  s.top = nil
end

-- log_set_mark records that entries at or before t have expired (t = nil:
-- none is left behind).
local function log_set_mark(s, t)
  if t == s.mark then
    return
  end
  s.mark = t
  if t then
    call('ZADD', s.key, str(-1 - t), MARK)
  else
    call('ZREM', s.key, MARK)
  end
end

-- log_drop makes the entries with At ≤ t expire (dropThrough): it removes
-- them, or with W = 0 at most LOG_PRUNE of them and counts the rest as
-- stale. Admissions made in this group are never that old: they are at now
-- or later.
local function log_drop(s, t)
  if s.mark and s.mark > t then
    t = s.mark -- expired already, though still in the set
  end
  if t < 0 or (s.dropped and s.dropped >= t) then
    return
  end
  s.dropped = t
  local k = call('ZCOUNT', s.key, 0, str(t))
  if k == 0 then
    s.stale = 0
    log_set_mark(s, nil)
    return
  end
  if s.w == 0 then
    -- Every entry is one unit: k entries are k units.
    local cut = str(t)
    if k > LOG_PRUNE then
      cut = call('ZRANGEBYSCORE', s.key, 0, cut, 'WITHSCORES', 'LIMIT', LOG_PRUNE - 1, 1)[2]
    end
    local removed = call('ZREMRANGEBYSCORE', s.key, 0, cut)
    s.stale = k - removed
    log_count(s, -removed, 0)
    log_set_mark(s, s.stale > 0 and t or nil)
  else
    local old = call('ZRANGEBYSCORE', s.key, 0, str(t))
    local freed, weighted, index = 0, 0, {}
    for i = 1, #old do
      local head, n = log_parse(old[i])
      freed = freed + n
      if n > 1 then
        weighted = weighted + 1
        if s.conc then
          index[#index + 1] = '=' .. head
        end
      end
    end
    call('ZREMRANGEBYSCORE', s.key, 0, str(t))
    for i = 1, #index, 1000 do
      call('ZREM', s.key, tunpack(index, i, min(i + 999, #index)))
    end
    s.stale = 0
    log_count(s, -freed, -weighted)
    log_set_mark(s, nil)
  end
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
-- (An entry that has expired is never the newest of a log that holds units.)
local function log_newest(s)
  local at = log_top(s) or nil
  for _, x in ipairs(s.adds) do
    if not at or x.at > at then
      at = x.at
    end
  end
  if at and s.dropped and at <= s.dropped then
    return nil -- only expired entries are left
  end
  return at
end

-- log_free_at is freeAt: the At of the entry whose passing frees need units,
-- oldest first, reading at most need (≤ LOG_WALK) unexpired entries; past
-- LOG_WALK units, the newest entry's At.
local function log_free_at(s, need)
  if need > LOG_WALK then
    return log_newest(s)
  end
  local from = 0
  if s.dropped and s.dropped >= 0 then
    from = '(' .. str(s.dropped)
  end
  local r = call('ZRANGEBYSCORE', s.key, from, '+inf', 'WITHSCORES', 'LIMIT', 0, need)
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
  local left, dw = held - min(n, held), 0
  if left > 0 then
    call('ZADD', s.key, str(at), log_member(head, left))
  end
  if held > 1 and left <= 1 then
    dw = -1
  end
  log_gone(s, at, held - left)
  log_count(s, left - held, dw)
end

-- log_take_newest takes up to n units out of the newest unexpired stored
-- entries (a sluice.Refund: the caller has saved pending admissions
-- first), reading them in chunks: O(entries touched).
local function log_take_newest(s, n)
  while n > 0 do
    local from = 0
    if s.dropped and s.dropped >= 0 then
      from = '(' .. str(s.dropped)
    end
    local r = call('ZREVRANGEBYSCORE', s.key, '+inf', from, 'WITHSCORES', 'LIMIT', 0, min(n, LOG_WALK))
    if #r == 0 then
      return
    end
    for i = 1, #r, 2 do
      local _, held = log_parse(r[i])
      local k = min(n, held)
      log_remove(s, tonumber(r[i + 1]), k)
      n = n - k
      if n == 0 then
        return
      end
    end
  end
end

-- log_release frees the stored lease id, if it is still there.
local function log_release(s, id)
  local n, dw = 1, 0
  local at = call('ZSCORE', s.key, id)
  if at then
    call('ZREM', s.key, id)
  else
    local w = call('ZSCORE', s.key, '=' .. id)
    if not w then
      return
    end
    n, dw = -tonumber(w), -1
    local m = log_member(id, n)
    at = call('ZSCORE', s.key, m)
    call('ZREM', s.key, m, '=' .. id)
  end
  log_gone(s, tonumber(at), n)
  log_count(s, -n, dw)
end

-- log_save writes the pending admissions and reports whether the key holds
-- unexpired entries; the caller then sets its TTL or deletes it.
local function log_save(s)
  if #s.adds == 0 then
    return s.u > s.stale
  end
  local top = log_top(s)
  local dw = 0
  for _, x in ipairs(s.adds) do
    local at = str(x.at)
    if x.id then
      call('ZADD', s.key, at, log_member(x.id, x.n))
      if x.n > 1 then
        call('ZADD', s.key, str(-x.n), '=' .. x.id)
        dw = dw + 1
      end
    else
      local n, held = x.n, 0
      if top and x.at <= top then -- else no stored entry has this At
        local r = call('ZRANGEBYSCORE', s.key, at, at, 'LIMIT', 0, 1)
        if #r > 0 then
          _, held = log_parse(r[1])
          call('ZREM', s.key, r[1])
        end
      end
      call('ZADD', s.key, at, log_member(at, n + held))
      if n + held > 1 and held <= 1 then
        dw = dw + 1
      end
    end
    if not top or x.at > top then
      top = x.at
    end
  end
  s.top = top
  local pend = s.pend
  s.adds, s.pend = {}, 0
  log_count(s, pend, dw)
  return true
end

-- log_decision decides cost against the units in use; horizon is how long
-- an entry counts after its At (the window, or 0 for leases).
local function log_decision(s, now, cost, p, horizon)
  local used = log_used(s)
  local d = {ALLOWED, 0, 0, 0, 0}
  if cost > p.quota then
    d[1] = TOO_HIGH
  elseif cost > 0 and used + cost > p.quota then -- a look is allowed, even in debt
    d[1] = LIMITED
    d[4] = log_free_at(s, used + cost - p.quota) + horizon - now
  end
  return d, used
end

-- log_finish completes decision d: remaining and resetAfter.
local function log_finish(s, d, used, now, p, horizon)
  d[2] = max(p.quota - used, 0) -- a charge may have put used above quota
  local at = log_newest(s)
  if at then
    d[3] = max(at + horizon - now, 0)
  end
  return d
end
