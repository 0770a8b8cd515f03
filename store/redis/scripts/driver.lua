-- driver.lua: decides a batch of groups in one call. Each group is one
-- Take (or the part of one Take in this hash slot): its ops are applied in
-- order, each seeing the state the earlier ones left, and the group is
-- all-or-nothing: if any op is denied, no charge is kept, releases are, and
-- every op that was allowed reports a cost-0 look at its uncharged state.
--
-- ARGV: minTTL (ms), channel, G, then G groups of
--   n, mode, now, then n ops of (limit, cost, lease)
-- where mode is 0 (decide), 1 (decide and report how to undo: the store
-- uses it when a Take spans hash slots), 2 (refund a group decided with
-- mode 1; followed by k, k undo triples (op, old, new) and "t" when the
-- charge read Redis TIME, else "") or 3 (allot: each op's cost field is an
-- allotment spec, see allot.lua, and its 5 values are allot's reply; the
-- script then includes allot.lua); now is µs, or "" for Redis TIME;
-- limit is "alg:quota:window:burst:interval" (algorithm.Params); cost is an
-- integer (a Take), "r" for a concurrency release, "+" and an integer for a
-- sluice.Charge, "-" and an integer for a sluice.Refund, or "x" for a
-- sluice.Reset (mode 0 only: the store never sends a cross-slot group an
-- action); lease is a decimal ID or "", or for a reservation of
-- reserve-then-settle (sluice.Op.Lease on another algorithm: pair_step)
-- "p" and lease:reserve:within:record (within in µs, record the Redis key
-- of its record, in the counter's slot: pairKey in slot.go).
-- KEYS: one per op, in order.
--
-- Invalidation: once every group is decided, the call PUBLISHes on channel
-- (the store's prefix and "invalidate"; "" for none) the keys that Refund
-- ops of cost > 0 and Reset ops of groups that were not denied changed,
-- each once, as one message of "<length>:<key>" items (Redis keys), the
-- keys reset first, then, if any key was reset, "r" and how many of the
-- items are resets (a reader that knows only items stops there), so that
-- every instance's cache of denials forgets them and every instance's
-- allotments of the keys reset are voided (invalidate.go). Nothing is
-- published for a call that changed none, and a PUBLISH that fails (an
-- ACL without the channel) fails nothing else.
--
-- Reply, per group: one string of packed little-endian doubles, now and
-- then reason, remaining, resetAfter, retryAfter, delay for each op (cheaper
-- for Redis to send and the store to read than 5 integers per op); for
-- mode 1 then k and k triples (op, old, new) naming the string states it
-- changed ("" = no key).

-- Group modes, as modeDecide, modeUndo and modeRefund in batch.go
-- (TestLuaConstants checks them).
local MODE_DECIDE = '0'
local MODE_UNDO = '1'
local MODE_REFUND = '2'
local MODE_ALLOT = '3'

-- Actions other than Take, as read from an op's cost field.
local CHARGE, REFUND, RESET = '+', '-', 'x'

local min_ttl = tonumber(ARGV[1])
local channel = ARGV[2]
local limits = {}
-- gave lists the keys Refund and Reset ops of groups that were not denied
-- changed, in order, each once; how[key] is RESET if any op reset it, else
-- REFUND: for the one PUBLISH of the call.
local gave, how = {}, {}

-- announce notes that the refund or reset (act) op j of pass g changed its
-- key.
local function announce(g, j, act)
  local key = KEYS[g.kbase + j]
  local was = how[key]
  if not was then
    gave[#gave + 1] = key
  end
  if was ~= RESET then
    how[key] = act
  end
end
-- clock is Redis TIME in µs, read at most once per call (by guard.lua, or
-- by time_now).
local clock = guard_now

-- limit returns the params of a limit spec, parsed once per call.
local function limit(spec)
  local p = limits[spec]
  if p then
    return p
  end
  local a, q, w, b, i = string.match(spec, '^(%d+):(%d+):(%d+):(%d+):(%d+)$')
  if not a or not A[tonumber(a)] then
    return error('sluice: bad limit ' .. spec)
  end
  p = {alg = tonumber(a), quota = tonumber(q), window = tonumber(w), burst = tonumber(b), interval = tonumber(i)}
  limits[spec] = p
  return p
end

-- time_now is Redis TIME in µs, read once per call.
local function time_now()
  if not clock then
    local t = call('TIME')
    clock = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return clock
end

-- ttl_ms is the TTL of a state fresh again in fresh µs: a whole number of
-- ms, which redis.call writes exactly (without exponent below 10^17), so
-- it need not be formatted here.
local function ttl_ms(fresh)
  return max(cdiv(fresh, 1000), min_ttl)
end

-- store_state writes the string state st of key with a TTL until it is
-- fresh again, or deletes the key when it already is.
local function store_state(key, alg, st, now, p)
  local f = alg.fresh(st, now, p)
  if f > 0 then
    local enc = alg.encode(st)
    call('SET', key, enc, 'PX', ttl_ms(f))
    return enc
  end
  call('DEL', key)
  return nil
end

-- A pass is the state of one group's keys, each loaded once: pass.cache
-- maps a key to its entry, pass.order lists the entries as first touched.
local function new_pass(kbase, ops)
  return {cache = {}, order = {}, kbase = kbase, ops = ops, snaps = {}}
end

-- get returns the entry of op j's key in pass g, loading it on first use.
local function get(g, j)
  local key = KEYS[g.kbase + j]
  local c = g.cache[key]
  if c then
    return c
  end
  local p = g.ops[j].p
  local alg = A[p.alg]
  c = {key = key, alg = alg, p = p, j = j}
  if alg.log then
    c.st = log_load(key, alg.conc)
  else
    c.raw = call('GET', key)
    c.st = alg.load(c.raw)
  end
  g.cache[key] = c
  g.order[#g.order + 1] = c
  return c
end

-- save_log commits the log state of entry c. A key left with no unexpired
-- entry is unlinked: it may still hold many expired ones, which Redis then
-- frees off the main thread.
local function save_log(c, now)
  local st = c.st
  if log_save(st) then
    if st.changed then
      local f = c.alg.fresh(st, now, c.p)
      if f > 0 then
        call('PEXPIRE', c.key, ttl_ms(f))
      else
        call('UNLINK', c.key)
      end
    end
  elseif st.exists or st.changed then
    call('UNLINK', c.key)
  end
end

-- save commits the pass's states: log admissions, refunded states put back
-- (c.restore), and charged string states (c.dirty).
local function save(order, now)
  for _, c in ipairs(order) do
    local alg = c.alg
    if alg.log then
      save_log(c, now)
    elseif c.restore == '' then
      call('DEL', c.key)
    elseif c.restore then
      -- Put the old state back even when it is already fresh at now: a
      -- clock that steps back (store/memory puts it back too) sees it again.
      local f = alg.fresh(alg.load(c.restore), now, c.p)
      call('SET', c.key, c.restore, 'PX', ttl_ms(max(f, 1)))
    elseif c.dirty then
      c.new = store_state(c.key, alg, c.st, now, c.p)
    end
  end
end

-- snapshot keeps the log key of entry c as it is (DUMP), before a refund or
-- reset writes it at once, when pass g may still be denied: undo_writes
-- puts it back. Once per key and pass.
local function snapshot(g, c)
  if not g.deniable or c.snapped then
    return
  end
  c.snapped = true
  c.snap = call('DUMP', c.key)
  if c.snap then
    c.pttl = call('PTTL', c.key)
  end
  g.snaps[#g.snaps + 1] = c
end

-- undo_writes puts back the log keys a denied pass wrote at once.
local function undo_writes(g)
  for _, c in ipairs(g.snaps) do
    if c.snap then
      call('RESTORE', c.key, str(max(c.pttl, 0)), c.snap, 'REPLACE')
    else
      call('DEL', c.key)
    end
  end
end

-- act applies a Charge, Refund or Reset (op.act) to its entry c: never
-- denied; the decision is a look after it. It returns the decision and
-- whether the state changed. Log refunds and resets are written at once
-- (after the pending admissions, and a snapshot), the rest at save.
local function act(g, c, op, now)
  local alg = c.alg
  if op.act == RESET then
    if alg.log then
      snapshot(g, c)
      call('UNLINK', c.key)
      c.st = {key = c.key, conc = alg.conc, adds = {}, pend = 0, stale = 0, u = 0, w = 0, exists = false}
    else
      c.st = alg.load(nil)
    end
    return alg.step(c.st, now, 0, c.p), true
  end
  if op.cost == 0 then
    return alg.step(c.st, now, 0, c.p), false
  end
  if op.act == CHARGE then
    return alg.charge(c.st, now, op.cost, c.p)
  end
  if alg.log then
    snapshot(g, c)
    log_save(c.st)
  end
  return alg.refund(c.st, now, op.cost, c.p)
end

-- Reserve-then-settle: a reservation's record is the string
-- "phase:n:exp" (PAIR_RESERVED …, lib.lua; n units reserved, exp its expiry
-- in µs) at the key the op names (op.rkey: the counter's hash slot).

-- pair_step applies the reservation op (op.pair) to its entry c, in the
-- steps of algorithm.PairStep and PairNext: no record (or an expired one),
-- a Take of the cost (op.reserve when it is 0), recorded reserved or
-- denied; reserved(n), the settle, a Charge of cost − n or a Refund of
-- n − cost (a window's only in the window of the reservation), recorded
-- settled; denied or settled, a look. A void (op.rel)
-- is a look that records denied when there is no record. The record is
-- written by pair_save once the group is decided (a denial is kept even
-- when the group is denied), with what the op was (op j, the record
-- before, the units it added to the counter: negative for a refund) for
-- put_undo. It returns the decision and whether the counter changed.
local function pair_step(g, c, op, now, j)
  local rkey = op.rkey
  local raw = call('GET', rkey)
  local phase, rn, exp = PAIR_NONE, 0, 0
  if raw then
    local a, b, e = string.match(raw, '^(%d+):(%d+):(%d+)$')
    phase, rn, exp = tonumber(a), tonumber(b), tonumber(e)
  end
  if exp <= now then
    phase = PAIR_NONE
  end
  local until_ = now + op.within
  local d, ch, rec, keep
  local delta = 0
  if op.rel then
    -- A void (a release of a reservation): a look, and a denied record
    -- when there is none, so that later calls of the lease are looks.
    if phase == PAIR_NONE then
      rec, keep = PAIR_DENIED .. ':0:' .. str(until_), true
    end
    d, ch = c.alg.step(c.st, now, 0, c.p), false
  elseif phase == PAIR_NONE then
    local n = op.cost
    if n == 0 then
      n = op.reserve
    end
    d, ch = c.alg.step(c.st, now, n, c.p)
    if d[1] == ALLOWED then
      rec, delta = PAIR_RESERVED .. ':' .. str(n) .. ':' .. str(until_), n
    else
      rec, keep = PAIR_DENIED .. ':0:' .. str(until_), true
    end
  elseif phase == PAIR_RESERVED then
    if op.cost > rn then
      delta = op.cost - rn
      d, ch = act(g, c, {act = CHARGE, cost = delta}, now)
    elseif op.cost < rn and not ((op.p.alg == FIXED_WINDOW or op.p.alg == SLIDING_WINDOW)
        and fdiv(exp - op.within, op.p.window) ~= fdiv(now, op.p.window)) then
      -- a window's refund only in the window that counted the
      -- reservation (algorithm.PairStep); else the settle is a look
      delta = op.cost - rn
      d, ch = act(g, c, {act = REFUND, cost = -delta}, now)
    else
      d, ch = c.alg.step(c.st, now, 0, c.p), false
    end
    rec = PAIR_SETTLED .. ':0:' .. str(until_)
  else
    d, ch = c.alg.step(c.st, now, 0, c.p), false
  end
  if rec then
    g.recs[#g.recs + 1] = {key = rkey, val = rec, ttl = str(cdiv(op.within, 1000)), keep = keep,
      j = j, old = raw or '', delta = delta}
  end
  return d, ch
end

-- pair_save writes the records pair_step left in recs: all of them when
-- the group was admitted, else only the denials.
local function pair_save(recs, denied)
  for _, r in ipairs(recs) do
    if r.keep or not denied then
      call('SET', r.key, r.val, 'PX', r.ttl)
    end
  end
end

-- step applies op to its entry c: a release, or a charge of cost (a
-- reservation's void, or its op once its group is decided, a look).
local function step(c, op, now, cost)
  if op.rel and not op.pair then
    return c.alg.release(c.st, now, c.p, op.lease), false
  end
  return c.alg.step(c.st, now, cost, c.p, op.lease)
end

local out, no = {}, 0

-- put appends one value to the reply.
local function put(v)
  no = no + 1
  out[no] = v
end

-- emit appends decision d to parts, the packed reply of a group.
local function emit(parts, d)
  parts[#parts + 1] = pack('<ddddd', d[1], d[2], d[3], d[4], d[5])
end

-- decide_one is the common case, one op on a bucket or window key, without
-- the bookkeeping a group needs: load, step, store if charged.
local function decide_one(key, now, p, cost)
  local alg = A[p.alg]
  local st = alg.load(call('GET', key))
  local d, charged = alg.step(st, now, cost, p)
  if charged then
    store_state(key, alg, st, now, p)
  end
  put(pack('<dddddd', now, d[1], d[2], d[3], d[4], d[5]))
end

-- read_ops parses n ops from ARGV[ai...] and returns them and the next ai.
local function read_ops(ai, n)
  local ops = {}
  for j = 1, n do
    local cost, lease = ARGV[ai + 1], ARGV[ai + 2]
    local op = {p = limit(ARGV[ai]), lease = lease}
    if lease == '' then
      op.lease = nil
    elseif string.byte(lease) == 112 then -- 'p': a reservation
      local l, r, w, k = string.match(lease, '^p(%d+):(%d+):(%d+):(.+)$')
      op.pair, op.lease, op.reserve, op.within, op.rkey = true, l, tonumber(r), tonumber(w), k
    end
    local head = string.sub(cost, 1, 1)
    if cost == 'r' then
      op.rel, op.cost = true, 0
    elseif cost == RESET then
      op.act, op.cost = RESET, 0
    elseif head == CHARGE or head == REFUND then
      op.act, op.cost = head, tonumber(string.sub(cost, 2))
    else
      op.cost = tonumber(cost)
    end
    ops[j] = op
    ai = ai + 3
  end
  return ops, ai
end

-- refund takes back group (mode 2) the charges of a group decided with
-- mode 1, whose undo triples start at ARGV[ai], then reports looks. It
-- returns the next ai.
local function refund(kbase, ops, now, ai)
  local n = #ops
  local g = new_pass(kbase, ops)
  local k = tonumber(ARGV[ai])
  ai = ai + 1
  local pairs_ = {}
  for _ = 1, k do
    local j = tonumber(ARGV[ai])
    if j < 0 then
      -- A reservation's record: put back as it was unless changed since;
      -- what op −j added to its counter is taken back below.
      local val, delta = string.match(ARGV[ai + 2], '^(.*)|(-?%d+)$')
      local rkey = ops[-j].rkey
      if call('GET', rkey) == val then
        local old = ARGV[ai + 1]
        local e = tonumber(string.match(old, ':(%d+)$') or '0')
        if old == '' or e <= now then
          call('DEL', rkey)
        else
          call('SET', rkey, old, 'PX', str(cdiv(e - now, 1000)))
        end
      end
      pairs_[-j] = tonumber(delta)
      ai = ai + 3
    else
      local c = get(g, j)
      if c.raw == ARGV[ai + 2] then
        -- Untouched since the charge: put the old state back exactly.
        c.restore = ARGV[ai + 1]
        c.st = c.alg.load(c.restore ~= '' and c.restore)
      elseif c.raw then
        c.inverse, c.ours, c.owed = true, c.alg.load(ARGV[ai + 2]), 0
      end
      ai = ai + 3
    end
  end
  -- Changed by others since: take back this group's charges, but only the
  -- part not already drained by now (the real now, when the group read
  -- Redis TIME), so that a refund never gives back more than the charge
  -- still holds.
  local rnow = now
  if ARGV[ai] == 't' then
    rnow = max(time_now(), now)
  end
  ai = ai + 1
  for j = 1, n do
    local op, c = ops[j], get(g, j)
    if c.inverse and op.pair then
      -- What the reservation or settle added (pair_step): a refund it
      -- gave is charged back.
      local delta = pairs_[j] or 0
      if delta > 0 then
        c.owed = c.owed + delta
      elseif delta < 0 then
        c.back = (c.back or 0) - delta
      end
    elseif c.inverse and op.cost > 0 and not op.rel then
      c.owed = c.owed + op.cost
    end
  end
  for _, c in ipairs(g.order) do
    if c.inverse and (c.owed > 0 or c.back) then
      if c.owed > 0 then
        c.alg.unstep(c.st, c.ours, c.owed, c.p, rnow)
      end
      if c.back then
        c.alg.charge(c.st, rnow, c.back, c.p)
      end
      c.restore = c.alg.encode(c.st)
    end
  end
  -- Log admissions are taken back entry by entry.
  for j = 1, n do
    local op = ops[j]
    if not op.rel and op.cost > 0 and A[op.p.alg].log then
      local c = get(g, j)
      c.alg.unadd(c.st, now, op.cost, op.p, op.lease)
    end
  end
  local parts = {pack('<d', now)}
  for j = 1, n do
    emit(parts, (step(get(g, j), ops[j], now, 0)))
  end
  save(g.order, now)
  put(table.concat(parts))
  return ai
end

-- relook is a denied group's second pass: from the stored state, keep the
-- releases and look instead of charging (log pruning is already written). res holds the first pass's
-- decisions; those that were allowed are replaced by looks.
local function relook(kbase, ops, now, res)
  local g = new_pass(kbase, ops)
  for j = 1, #ops do
    if ops[j].rel then
      local c = get(g, j)
      step(c, ops[j], now, 0)
      c.dirty = true
    end
  end
  for j = 1, #ops do
    local op = ops[j]
    if not op.rel then
      local c = get(g, j)
      if res[j][1] == ALLOWED then
        res[j] = step(c, op, now, 0)
      end
    end
  end
  return g
end

-- put_undo appends, for mode 1, how to undo the group's charges: k and k
-- triples (op, old, new) naming the string states it changed ("" = no key).
-- Log admissions need none: a refund finds them by now, cost and lease.
local function put_undo(g, denied)
  local undo = {}
  if not denied then
    for _, c in ipairs(g.order) do
      if not c.alg.log and c.dirty then
        undo[#undo + 1] = c.j
        undo[#undo + 1] = c.raw or ''
        undo[#undo + 1] = c.new or ''
      end
    end
    -- A reservation's record: (−j, the record before, the record written
    -- "|" the units op j added to its counter).
    for _, r in ipairs(g.recs or {}) do
      undo[#undo + 1] = -r.j
      undo[#undo + 1] = r.old
      undo[#undo + 1] = r.val .. '|' .. str(r.delta)
    end
  end
  put(#undo / 3)
  for _, v in ipairs(undo) do
    put(v)
  end
end

-- decide decides one group (mode 0 or 1), all-or-nothing.
local function decide(kbase, ops, now, mode)
  local g = new_pass(kbase, ops)
  local denied, charged = false, false
  local res = {}
  local recs = {}
  g.recs = recs
  for j = 1, #ops do
    local op = ops[j]
    -- Only a Take of cost > 0, or a reservation, can deny the group.
    g.deniable = g.deniable or (not op.act and not op.rel and (op.cost > 0 or op.pair))
    if op.act and mode ~= MODE_DECIDE then
      return error('sluice: charge, refund or reset in a cross-slot group')
    end
    if op.pair and mode ~= MODE_DECIDE and A[op.p.alg].log then
      return error('sluice: reservation of a log key in a cross-slot group')
    end
  end
  for j = 1, #ops do
    local c, op = get(g, j), ops[j]
    local d, ch
    if op.act then
      d, ch = act(g, c, op, now)
    elseif op.pair then
      d, ch = pair_step(g, c, op, now, j)
    else
      d, ch = step(c, op, now, op.cost)
    end
    if ch or op.rel then
      c.dirty = true
    end
    charged = charged or ch
    if d[1] ~= ALLOWED then
      denied = true
    end
    res[j] = d
  end
  if denied and (charged or #g.snaps > 0) then
    -- Nothing was written yet but log refunds and resets, which go back
    -- as they were: start again from the stored state.
    undo_writes(g)
    g = relook(kbase, ops, now, res)
  end
  save(g.order, now)
  pair_save(recs, denied)
  local parts = {pack('<d', now)}
  for j = 1, #ops do
    emit(parts, res[j])
    local op = ops[j]
    if not denied and (op.act == RESET or (op.act == REFUND and op.cost > 0)) then
      announce(g, j, op.act)
    end
  end
  put(table.concat(parts))
  if mode == MODE_UNDO then
    put_undo(g, denied)
  end
end

-- is_take reports whether an op's cost field is a Take's: it starts with a
-- digit (a release or an action starts with a letter or a sign).
local function is_take(cost)
  local b = string.byte(cost)
  return b >= 48 and b <= 57
end

-- The groups, in order; each reads its header and ops from ARGV[ai...] and
-- its keys from KEYS[kbase + 1...].
local ai, kbase = 4, 0
for _ = 1, tonumber(ARGV[3]) do
  local n, mode, now = tonumber(ARGV[ai]), ARGV[ai + 1], ARGV[ai + 2]
  ai = ai + 3
  if now == '' then
    now = time_now()
  else
    now = tonumber(now)
  end
  if mode == MODE_ALLOT then
    local parts = {pack('<d', now)}
    for j = 1, n do
      parts[j + 1] = pack('<ddddd', allot(KEYS[kbase + j], now, ARGV[ai], ARGV[ai + 1], min_ttl))
      ai = ai + 3
    end
    put(table.concat(parts))
  elseif n == 1 and mode == MODE_DECIDE and not A[limit(ARGV[ai]).alg].log and is_take(ARGV[ai + 1]) and ARGV[ai + 2] == '' then
    decide_one(KEYS[kbase + 1], now, limit(ARGV[ai]), tonumber(ARGV[ai + 1]))
    ai = ai + 3
  else
    local ops
    ops, ai = read_ops(ai, n)
    if mode == MODE_REFUND then
      ai = refund(kbase, ops, now, ai)
    else
      decide(kbase, ops, now, mode)
    end
  end
  kbase = kbase + n
end
if #gave > 0 and channel ~= '' then
  local items, resets = {}, 0
  for _, key in ipairs(gave) do
    if how[key] == RESET then
      resets = resets + 1
      items[resets] = #key .. ':' .. key
    end
  end
  for _, key in ipairs(gave) do
    if how[key] ~= RESET then
      items[#items + 1] = #key .. ':' .. key
    end
  end
  if resets > 0 then
    items[#items + 1] = 'r' .. resets
  end
  -- pcall: an ACL user without the channel's permission still resets and
  -- refunds (unannounced) rather than failing them.
  redis.pcall('PUBLISH', channel, table.concat(items))
end
return out
