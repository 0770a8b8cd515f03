-- lib.lua: helpers shared by the algorithm scripts. The store concatenates
-- lib.lua, the seven algorithm files and driver.lua into one script.
--
-- All times are integer microseconds held in Lua numbers (IEEE doubles):
-- exact below 2^53, which sluice.Limit.Validate guarantees for every
-- quantity the algorithms form. Division is the one operation that needs
-- care: fdiv corrects the float quotient so that it is the exact floor.

local floor, ceil, max, min = math.floor, math.ceil, math.max, math.min
local tonumber, fmt = tonumber, string.format
local call = redis.call

-- A maps an algorithm code (sluice.Algorithm) to its implementation.
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

-- str formats an integer-valued number without exponent or fraction
-- (tostring would print 1.767e+15).
local function str(x)
  return fmt('%.0f', x)
end

-- Bucket and window states are stored packed: little-endian doubles (exact
-- for the integers they hold), 8 bytes per number, which is both smaller and
-- far cheaper to read and write than decimal text.
local pack, unpack = struct.pack, struct.unpack

-- Decision codes, as algorithm.Reason.
local ALLOWED, LIMITED, TOO_HIGH = 0, 1, 2
