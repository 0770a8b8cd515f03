-- single.lua: a one-key driver, used only as the baseline the benchmarks
-- compare the batched store against (one EVALSHA per decision). It is
-- concatenated after lib.lua, gcra.lua and token_bucket.lua.
-- KEYS[1]; ARGV: limit "alg:quota:window:burst:interval", cost, now ("" =
-- Redis TIME). Reply: reason, remaining, resetAfter, retryAfter, delay.

local a, q, w, b, i = string.match(ARGV[1], '^(%d+):(%d+):(%d+):(%d+):(%d+)$')
local p = {alg = tonumber(a), quota = tonumber(q), window = tonumber(w), burst = tonumber(b), interval = tonumber(i)}
local now, floor_ms = tonumber(ARGV[3]), 1
if now then
  floor_ms = 3600000 -- a given clock says nothing about Redis's expiry clock
else
  local t = call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local alg = A[p.alg]
local raw = call('GET', KEYS[1])
local st = alg.load(raw)
local d, charged = alg.step(st, now, tonumber(ARGV[2]), p)
if charged then
  call('SET', KEYS[1], alg.encode(st), 'PX', str(max(cdiv(alg.fresh(st, now, p), 1000), floor_ms)))
end
return d
