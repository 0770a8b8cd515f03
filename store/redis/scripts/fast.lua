-- fast.lua: the fast driver, for a call whose every group is one Take (no
-- release, no action, mode 0) on a bucket or window key (token_bucket,
-- gcra, leaky_bucket, fixed_window, sliding_window): the store's hot mix.
-- It decides exactly as driver.lua with the algorithm's file does (load,
-- step, store if charged), but without their tables, closures and parsing, with at most one TIME per call, one
-- MGET for every key and one reply array: what Redis spends per decision
-- is then mostly the GET's share of the MGET and the SET. It runs after
-- head.lua alone (the deadline guard and the MGET, shared with one.lua:
-- min_ttl, clock, raws), not after lib.lua, whose set-up costs every call
-- as much as a few decisions; TestFastConstants checks that the constants
-- it repeats are lib.lua's.
--
-- ARGV: minTTL (ms), deadline (Redis TIME µs; "" for none: see guard.lua),
-- dup ("1" when a key may come more than once in the call, else ""), then
-- runs of ops that share limit, cost and now: count, quota, window (µs),
-- cost (an integer), now (µs, or "" for Redis TIME), algorithm (algLetter:
-- "f" fixed_window, "s" sliding_window, "g" gcra, "l" leaky_bucket, "t"
-- token_bucket), burst, interval (µs). KEYS: one per op, in order.
--
-- Reply: an array of integers: per run its now, then per op of the run
--   a fixed window: one code ((remaining × 4 + reason) × 2 + held) where
--   held is 1 when the window holds a count (resetAfter is then the time
--   to the window's end, else 0), and retryAfter is the time to the
--   window's end when reason is LIMITED; the window is the one now is in;
--   or, when the key's window is another (the clock went back) or
--   remaining ≥ 2^49, −1 and then reason, remaining, resetAfter,
--   retryAfter;
--   a sliding window, admitted in the window now is in: one code
--   ((remaining × 4 + reason) × 4 + held) where held is 2 when the window
--   holds a count (resetAfter: to the end of the next window), 1 when only
--   the previous one does (to the end of this one), else 0; otherwise
--   (denied, or the clock went back, or remaining ≥ 2^49) −2 and the
--   state before the op, id, cur, prev, from which the store computes the
--   figures with algorithm.SlidingWindow (this script decides, with the
--   same double operations; only a Take it admitted was charged);
--   a bucket: its state before the op, the TAT (token_bucket: missing and
--   last), from which the store computes the decision with the algorithm
--   (this script decides with the same integer arithmetic and charges what
--   it admits).
-- Delay is always 0 for a window. Or "sluice:expired" when the call runs
-- after its deadline, having done nothing.
--
-- TTL: a charge that starts the key's window sets it, PX until the state
-- is fresh again (a fixed window's end; a sliding window's next window's
-- end; a bucket's TAT, on every charge), at least minTTL; a charge in the same window, which holds a count,
-- keeps it (KEEPTTL), since it would set the same instant, when minTTL is
-- 0 (the Redis clock's default). With a minTTL the TTL is set on every
-- charge, as driver.lua does.

local call, tonumber, floor, ceil, KEYS, ARGV = redis.call, tonumber, math.floor, math.ceil, KEYS, ARGV
local pack, unpack, tunpack = struct.pack, struct.unpack, unpack

-- Decision codes, as lib.lua's.
local ALLOWED = 0
local LIMITED = 1
local TOO_HIGH = 2

-- cdiv is lib.lua's: ⌈a/b⌉ for a ≥ 0, b > 0, exact for a < 2^53. (Written
-- out, as the window's floor below and each branch's SET are: on this path
-- each Lua call costs Redis a few hundred instructions: routing the writes
-- and divisions through helpers cost 4.5 % more per token_bucket decision,
-- measured under callgrind: 30,071–30,260 against 28,762–28,867.)
local function cdiv(a, b)
  a = a + b - 1
  local q = floor(a / b)
  local r = a - q * b
  if r < 0 then
    q = q - 1
  elseif r >= b then
    q = q + 1
  end
  return q
end

-- latest holds the state a charge of this call wrote, by key, when a key
-- may come again later in the call.
local latest = ARGV[3] == '1' and {}
local out, no = {}, 0
local COMPACT = 562949953421312 -- 2^49
local k, ai, nargs = 0, 4, #ARGV
while ai <= nargs do
  local count, q, w, cost, now = tonumber(ARGV[ai]), tonumber(ARGV[ai + 1]), tonumber(ARGV[ai + 2]), tonumber(ARGV[ai + 3]), ARGV[ai + 4]
  local alg = ARGV[ai + 5]
  local slide, fixed = alg == 's', alg == 'f'
  local burst, iv = tonumber(ARGV[ai + 6]), tonumber(ARGV[ai + 7])
  ai = ai + 8
  if now == '' then
    if not clock then
      local t = call('TIME')
      clock = tonumber(t[1]) * 1000000 + tonumber(t[2])
    end
    now = clock
  else
    now = tonumber(now)
  end
  no = no + 1
  out[no] = now
  -- lib.lua's fdiv: the exact floor of now / w.
  local base = floor(now / w)
  local r = now - base * w
  if r < 0 then
    base = base - 1
  elseif r >= w then
    base = base + 1
  end
  -- hot: the common case below (a charge in the key's window, which
  -- holds a count, with room for it) can be taken without the general
  -- step, whose outcome it is.
  local hot = min_ttl == 0 and cost > 0 and q < COMPACT
  for _ = 1, count do
    k = k + 1
    local key = KEYS[k]
    local raw = raws[k]
    if latest and latest[key] ~= nil then
      raw = latest[key] -- false: deleted earlier in this call
    end
    if not slide and not fixed then
      -- bucket.lua's bucket_decide, as gcra.lua, leaky_bucket.lua and
      -- token_bucket.lua step with it; the reply is the state before.
      local tat, m, l = 0, 0, 0
      if alg == 't' then
        if raw and #raw == 16 then
          m, l = unpack('<dd', raw)
        end
        tat = l + m * iv
      elseif raw and #raw == 8 then
        tat = unpack('<d', raw)
      end
      if cost > 0 and cost <= burst then
        local base = tat
        if base < now then
          base = now
        end
        local nt = base + cost * iv
        if nt - now - burst * iv <= 0 then
          local enc
          if alg == 't' then
            local nm = cdiv(nt - now, iv)
            enc = pack('<dd', nm, nt - nm * iv)
          else
            enc = pack('<d', nt)
          end
          if nt - now > 0 then
            local ms = cdiv(nt - now, 1000)
            if ms < min_ttl then
              ms = min_ttl
            end
            call('SET', key, enc, 'PX', ms)
          else
            enc = false
            call('DEL', key)
          end
          if latest then
            latest[key] = enc
          end
        end
      end
      if alg == 't' then
        out[no + 1], out[no + 2] = m, l
        no = no + 2
      else
        no = no + 1
        out[no] = tat
      end
    elseif slide then
      -- sliding_window.lua's load, roll and step.
      local sid, scur, sprev = 0, 0, 0
      if raw and #raw == 24 then
        sid, scur, sprev = unpack('<ddd', raw)
      end
      local id, cur, prev = base, scur, sprev
      if id < sid then
        id = sid
      end
      if id == sid + 1 then
        cur, prev = 0, scur
      elseif id ~= sid then
        cur, prev = 0, 0
      end
      local e = now - id * w
      if e < 0 then
        e = 0
      end
      local est = cur
      if prev ~= 0 then
        est = est + ceil(prev * (w - e) / w) -- sliding_window.lua's weighted
      end
      local admit = cost <= q and (cost == 0 or est + cost <= q)
      if admit and cost > 0 then
        cur, est = cur + cost, est + cost
        local enc = pack('<ddd', id, cur, prev)
        if min_ttl == 0 and id == sid and scur > 0 then
          call('SET', key, enc, 'KEEPTTL')
        else
          local ms = cdiv((id + 2) * w - now, 1000)
          if ms < min_ttl then
            ms = min_ttl
          end
          call('SET', key, enc, 'PX', ms)
        end
        if latest then
          latest[key] = enc
        end
      end
      local remaining, held = q - est, 0
      if cur > 0 then
        held = 2
      elseif prev > 0 then
        held = 1
      end
      if admit and id == base and remaining >= 0 and remaining < COMPACT then
        no = no + 1
        out[no] = (remaining * 4 + ALLOWED) * 4 + held
      else
        out[no + 1], out[no + 2], out[no + 3], out[no + 4] = -2, sid, scur, sprev
        no = no + 4
      end
    else
      -- fixed_window.lua's load and step.
      local sid, scur = 0, 0
      if raw and #raw == 16 then
        sid, scur = unpack('<dd', raw)
      end
      if hot and sid == base and scur > 0 and scur + cost <= q then
        local enc = pack('<dd', base, scur + cost)
        call('SET', key, enc, 'KEEPTTL')
        if latest then
          latest[key] = enc
        end
        no = no + 1
        out[no] = (q - scur - cost) * 8 + 1 -- allowed, held
      else
        local id, cur = base, scur
        if id < sid then
          id = sid
        end
        if id ~= sid then
          cur = 0
        end
        local stop = (id + 1) * w - now
        local reason, retry = ALLOWED, 0
        if cost > q then
          reason = TOO_HIGH
        elseif cost > 0 and cur + cost > q then -- a look is allowed, even in debt
          reason, retry = LIMITED, stop
        elseif cost > 0 then
          cur = cur + cost
          -- store_state: cur > 0, so the state is fresh only at stop > 0.
          local enc = pack('<dd', id, cur)
          if min_ttl == 0 and id == sid and scur > 0 then
            call('SET', key, enc, 'KEEPTTL')
          else
            -- At least minTTL; a whole number, which redis.call writes
            -- without exponent below 10^17.
            local ms = cdiv(stop, 1000)
            if ms < min_ttl then
              ms = min_ttl
            end
            call('SET', key, enc, 'PX', ms)
          end
          if latest then
            latest[key] = enc
          end
        end
        local remaining, held = q - cur, 0
        if remaining < 0 then -- a charge may have put cur above quota
          remaining = 0
        end
        if cur > 0 then
          held = 1
        end
        if id == base and remaining < COMPACT then
          no = no + 1
          out[no] = (remaining * 4 + reason) * 2 + held
        else
          out[no + 1], out[no + 2], out[no + 3], out[no + 4], out[no + 5] = -1, reason, remaining, held * stop, retry
          no = no + 5
        end
      end
    end
  end
end
-- Integers, not packed doubles: for one number per op Redis writes an
-- integer reply for less than struct.pack costs.
return out
