-- lib.lua: helpers shared by the algorithm scripts. The store concatenates
-- lib.lua, the algorithm files a batch needs (allot.lua when it leases
-- allotments), guard.lua and driver.lua into one script.
--
-- All times are integer microseconds held in Lua numbers (IEEE doubles):
-- exact below 2^53, which sluice.Limit.Validate guarantees for every
-- quantity the algorithms form. Division is the one operation that needs
-- care: fdiv corrects the float quotient so that it is the exact floor.

local floor, ceil, max, min = math.floor, math.ceil, math.max, math.min
local tonumber, fmt, tunpack = tonumber, string.format, unpack
local call = redis.call

-- Algorithm codes, as sluice.Algorithm (TestLuaConstants checks them).
local TOKEN_BUCKET = 1
local GCRA = 2
local LEAKY_BUCKET = 3
local FIXED_WINDOW = 4
local SLIDING_WINDOW = 5
local SLIDING_LOG = 6
local CONCURRENCY = 7

-- LOG_WALK is algorithm.ExactRetryUnits: the most log entries a RetryAfter
-- reads (TestLuaConstants checks it).
local LOG_WALK = 64

-- MAX_EXACT is algorithm.MaxExact, 2^53 − 1: charges cap counts and instants
-- there, so that doubles hold them exactly (TestLuaConstants checks it).
local MAX_EXACT = 9007199254740991

-- The phases of a reservation's record (reserve-then-settle, driver.lua's
-- pair_step), as algorithm.PairNone … PairSettled (TestLuaConstants checks
-- them).
local PAIR_NONE = 0
local PAIR_RESERVED = 1
local PAIR_DENIED = 2
local PAIR_SETTLED = 3

-- A maps an algorithm code to its implementation.
local A = {}

-- fdiv is ⌊a/b⌋ for b > 0, exact for |a| < 2^53 (algorithm.FloorDiv).
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

-- cdiv is ⌈a/b⌉ for a ≥ 0, b > 0 (algorithm.CeilDiv).
local function cdiv(a, b)
  return fdiv(a + b - 1, b)
end

-- charge_count is algorithm's chargeCount: a window count after a charge of
-- cost, capped at 2 × quota (and MAX_EXACT). Doubles round a sum past 2^53
-- to at least 2^53, so the min is the same as Go's.
local function charge_count(cur, cost, quota)
  return min(cur + min(cost, MAX_EXACT), 2 * quota, MAX_EXACT)
end

-- window_settled returns the look at the window state s (fixed_window.lua,
-- sliding_window.lua) after a charge or refund and
-- whether s differs from (id, cur, prev), the state before it.
local function window_settled(alg, s, now, p, id, cur, prev)
  local d = alg.step(s, now, 0, p)
  return d, s.id ~= id or s.cur ~= cur or s.prev ~= prev
end

-- str formats an integer-valued number without exponent or fraction
-- (tostring would print 1.767e+15).
local function str(x)
  return fmt('%.0f', x)
end

-- Bucket and window states are stored packed: little-endian doubles (exact
-- for the integers they hold), 8 bytes per number, which is both smaller and
-- far cheaper to read and write than decimal text.
local pack, unpack = struct.pack, struct.unpack

-- Decision codes, as algorithm.Reason (TestLuaConstants checks them).
local ALLOWED = 0
local LIMITED = 1
local TOO_HIGH = 2
