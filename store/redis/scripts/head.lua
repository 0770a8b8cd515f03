-- head.lua: the start of the fast.lua and one.lua scripts (the store puts
-- it first, before any other file, so that unpack is Lua's, not lib.lua's):
-- the deadline guard with the call's one TIME, and one MGET of every key
-- (in parts of 512). It defines min_ttl (ARGV[1], ms), clock
-- (Redis TIME in µs when ARGV[2] holds a deadline, else nil: the driver
-- reads TIME when an op needs it) and raws (each key's state, or false).
-- A call that runs after its deadline (ARGV[2], Redis TIME µs; "" for none:
-- see guard.lua) does nothing and answers "sluice:expired".

local call, tunpack = redis.call, unpack
local min_ttl = tonumber(ARGV[1])
local clock
if ARGV[2] ~= '' then
  local t = call('TIME')
  clock = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if clock > tonumber(ARGV[2]) then
    return 'sluice:expired'
  end
end

-- Every key's state, by MGET of up to 512 keys at a time.
local raws
do
  local n, i = #KEYS, 1
  if n <= 512 then
    raws, i = call('MGET', tunpack(KEYS)), n + 1
  else
    raws = {}
  end
  while i <= n do
    local j = math.min(i + 511, n)
    local got = call('MGET', tunpack(KEYS, i, j))
    for x = i, j do
      raws[x] = got[x - i + 1]
    end
    i = j + 1
  end
end
