-- guard.lua: a batch call that Redis runs only after the store stopped
-- waiting for it (it sat in a socket buffer while Redis was stalled, or the
-- reply could not come back in time) does nothing, so that a Take the
-- caller already saw fail charges nothing. The store passes the deadline,
-- in Redis TIME microseconds, as the last ARGV: "g:" and the deadline, or
-- "g:" alone for none; the driver never reads that far. It is concatenated
-- just before driver.lua.
-- The TIME it reads is the call's clock (guard_now, driver.lua's time_now):
-- one TIME per call.
local guard_now
do
  local last = ARGV[#ARGV]
  local deadline = string.sub(last, 1, 2) == 'g:' and tonumber(string.sub(last, 3))
  if deadline then
    local t = redis.call('TIME')
    guard_now = tonumber(t[1]) * 1000000 + tonumber(t[2])
    if guard_now > deadline then
      return 'sluice:expired'
    end
  end
end
