-- Replica heartbeat: one call per replica per health ping (every second), never per request.
-- KEYS[1]  the sorted set of live replicas (member: replica id, score: last beat, ms, Redis time)
-- ARGV[1]  this replica's id
-- ARGV[2]  time to live of a beat, ms: a replica silent this long no longer counts
-- Reply: the number of live replicas, this one included (integer).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl)
redis.call('PEXPIRE', KEYS[1], ttl * 3)
return redis.call('ZCARD', KEYS[1])
