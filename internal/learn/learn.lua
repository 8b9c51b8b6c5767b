-- learn.lua merges a delta into one learned distribution (internal/learn), atomically.
-- KEYS[1]: the distribution, a hash: field "t" the time of its weights in milliseconds, and one
--          field per non-empty bin (its index in decimal) holding the bin's decayed weight.
-- ARGV[1]: now in milliseconds, or 0 for the server's TIME (tests pass their clock).
-- ARGV[2]: the half-life in milliseconds; ARGV[3]: the key's time to live in milliseconds.
-- ARGV[4..]: pairs of bin index and weight to add, as of now.
-- Weights already stored are decayed from "t" to now (2^-(elapsed/half-life)); a bin whose
-- weight falls below 0.001 is dropped. Time never runs backwards: an earlier now is "t".
-- Reply: the number of bins stored.
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local hl = tonumber(ARGV[2])
local h = redis.call('HGETALL', KEYS[1])
local at
local w = {}
for i = 1, #h, 2 do
  if h[i] == 't' then at = tonumber(h[i + 1]) else w[h[i]] = tonumber(h[i + 1]) end
end
local f = 1
if at then
  if now < at then now = at end
  f = 2 ^ (-(now - at) / hl)
end
for b, x in pairs(w) do w[b] = x * f end
for i = 4, #ARGV, 2 do
  local b = ARGV[i]
  w[b] = (w[b] or 0) + tonumber(ARGV[i + 1])
end
local args = {'t', string.format('%d', now)}
local n = 0
for b, x in pairs(w) do
  if x >= 0.001 then
    args[#args + 1] = b
    args[#args + 1] = string.format('%.17g', x)
    n = n + 1
  end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], unpack(args))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return n
