-- log.lua: the log state sliding_log.lua and concurrency.lua share.
-- State: a sorted set, one member per entry, score = At (µs). A sliding_log member is At, or "At:N" when N > 1; a concurrency
-- member is the lease ID, or "ID:N" when N > 1. Changes are recorded as
-- commands (s.cmds) and replayed on the key when the batch commits.

local function log_load(key, conc)
  local raw = call('ZRANGE', key, 0, -1, 'WITHSCORES')
  local e = {}
  for i = 1, #raw, 2 do
    local m = raw[i]
    local head, n = string.match(m, '^([^:]+):?(%d*)$')
    local x = {at = tonumber(raw[i + 1]), n = tonumber(n) or 1, m = m}
    if conc then
      x.id = head
    end
    e[#e + 1] = x
  end
  return {e = e, cmds = {}}
end

local function log_member(x)
  local head = x.id or str(x.at)
  if x.n > 1 then
    return head .. ':' .. str(x.n)
  end
  return head
end

-- log_drop removes the leading entries with At ≤ t (dropThrough).
local function log_drop(s, t)
  local e, i = s.e, 1
  while i <= #e and e[i].at <= t do
    i = i + 1
  end
  if i == 1 then
    return
  end
  local kept = {}
  for j = i, #e do
    kept[#kept + 1] = e[j]
  end
  s.e = kept
  s.cmds[#s.cmds + 1] = {'prune', t}
end

local function log_sum(e)
  local u = 0
  for i = 1, #e do
    u = u + e[i].n
  end
  return u
end

-- log_free_at is freeAt: the At of the entry whose passing frees need units.
local function log_free_at(e, need)
  local freed = 0
  for i = 1, #e do
    freed = freed + e[i].n
    if freed >= need then
      return e[i].at
    end
  end
  return 0
end

-- log_insert is insert: keep order by At; merge a sliding_log entry into one
-- with the same At.
local function log_insert(s, x)
  local e = s.e
  local i = #e + 1
  while i > 1 and e[i - 1].at > x.at do
    i = i - 1
  end
  local c = s.cmds
  if not x.id and i > 1 and e[i - 1].at == x.at and not e[i - 1].id then
    local y = e[i - 1]
    c[#c + 1] = {'rem', y.m}
    y.n = y.n + x.n
    y.m = log_member(y)
    c[#c + 1] = {'add', y.at, y.m}
    return
  end
  x.m = log_member(x)
  table.insert(e, i, x)
  c[#c + 1] = {'add', x.at, x.m}
end

-- log_unadd takes back an entry that log_insert added or merged (a refund).
local function log_unadd(s, at, n, id)
  local e, c = s.e, s.cmds
  for i = #e, 1, -1 do
    local y = e[i]
    if y.at == at and y.id == id then
      c[#c + 1] = {'rem', y.m}
      y.n = y.n - n
      if y.n <= 0 then
        table.remove(e, i)
      else
        y.m = log_member(y)
        c[#c + 1] = {'add', y.at, y.m}
      end
      return
    end
  end
end

local function log_save(key, s, fresh)
  for _, c in ipairs(s.cmds) do
    if c[1] == 'prune' then
      call('ZREMRANGEBYSCORE', key, '-inf', str(c[2]))
    elseif c[1] == 'rem' then
      call('ZREM', key, c[2])
    else
      call('ZADD', key, str(c[2]), c[3])
    end
  end
  s.cmds = {}
  return #s.e > 0
end

local function log_decision(s, now, cost, p, horizon)
  local used = log_sum(s.e)
  local d = {ALLOWED, 0, 0, 0, 0}
  if cost > p.quota then
    d[1] = TOO_HIGH
  elseif used + cost > p.quota then
    d[1] = LIMITED
    d[4] = log_free_at(s.e, used + cost - p.quota) + horizon - now
  end
  return d, used
end

