-- bucket.lua: check every bucket of one decision and debit all of them, or none, in one call; one
-- script run carries one or more such calls (the concurrent decisions of one tag, coalesced), each
-- decided on its own, in order. It is the single source of truth for the Redis store; memory.go
-- mirrors it operation by operation.
--
-- Units
--   time      microseconds since the Unix epoch, from redis.call('TIME') only (exact in a double
--             until the year 2255); periods and waits in microseconds.
--   amounts   tokens or requests, integers up to 1e12 passed as doubles; a token bucket's
--             level is a double (fractional while it refills), stored as the double's 8 bytes so
--             that it reads back bit for bit.
--
-- KEYS        the buckets of every call, call after call; every key of a run shares one Redis
--             Cluster hash slot (the calls' tag).
-- ARGV[i]     call i, binary, read with struct.unpack (little-endian; numbers are doubles,
--             exact for the integers they carry): the header '<c1ddc0' <op> <max_wait_us>
--             <lease>, then for each of its keys '<c1ddddd' <alg> <limit> <period_us> <capacity>
--             <amount> <reserve>
--               op        T = take, A = adjust, L = lower
--               lease     the in-flight lease id of the call's concurrency buckets, '-' for none
--               alg       t = token bucket, s = sliding window, d = daily quota, m = monthly quota,
--                         c = concurrency (period_us is the lease's time to live)
--               amount    take: the cost (>= 0; a concurrency bucket: 0 or 1, one lease);
--                         adjust: the delta (> 0 refunds, < 0 charges; on a concurrency bucket
--                         > 0 releases the lease, <= 0 does nothing);
--                         lower: the remaining the provider reports; a bucket holding more is
--                         charged the difference, one holding less is left alone
--               reserve   floor x capacity: a take must leave at least this much
--             Binary rather than text: parsing decimal text in Lua was a sixth of the script's
--             CPU (docs/performance.md). The call's key count follows from the length.
--
-- Reply: an array with one reply per call, in order. A call's error (a key of another type, say)
-- is its own reply, an error; the other calls are decided all the same. Malformed arguments,
-- which leave the calls' keys unknown, fail the whole run.
-- Reply (take): 3 + 4 x n little-endian int64s in one string (struct '<i8...'; numbers are
-- truncated toward zero, as Redis truncates Lua numbers in replies), cheaper to build and to
-- read than an array of integers:
--   outcome, blocking, wait_us, then per key: remaining, capacity, reset_us, wait_us
--   outcome   0 allowed, 1 delayed (debited; proceed after wait_us), 2 denied (nothing debited;
--             retry after wait_us), 3 impossible (nothing debited; a cost exceeds capacity - reserve)
--   blocking  0-based index of the bucket with the longest wait (or the first impossible one), -1
--   remaining the level after the call, rounded down (negative while in debt)
--   reset_us  time until the bucket is full again; for a quota, until the next period starts
--   wait_us   time until that bucket alone could pay; the top-level wait_us is their maximum
--             a concurrency bucket that is full denies even within max_wait (a lease cannot be
--             reserved ahead); its wait is the time until its oldest lease expires, at most BUSY_US
-- Reply (adjust, lower): the number of the call's keys.
--
-- Storage (one key per bucket, expiring once the bucket would be full again plus MARGIN_MS; a
-- missing key is a full bucket, and a write that leaves a bucket full deletes its key):
--   token bucket   a 16-byte string, struct '<dd': level, time of that level
--   quota          a 16-byte string, struct '<dd': amount used (above limit: debt carried into the
--                  next periods), period index
--   sliding window a hash: <sub-window index> = amount admitted in that sub-window
--   concurrency    a sorted set: lease id -> expiry time; expired leases are pruned on write
-- The two-number buckets are strings so that one MGET reads all of them and one SET ... PX writes
-- each with its expiry: a hash took an HMGET per bucket and an HSET and a PEXPIRE per write, and
-- its numbers as decimal text (docs/performance.md). A string key of any other length (not
-- written by this script) reads as a full bucket and is overwritten by the next write.

local SLOTS = 10        -- sub-windows per sliding window
local MARGIN_MS = 1000  -- expiry margin
local DAY_US = 86400000000
local EPS = 1e-14       -- float tolerance, relative to capacity (token bucket only)
local BUSY_US = 1000000 -- longest wait advertised by a full concurrency bucket

local function num(x)
  return string.format('%.17g', x)
end

-- Days since 1970-01-01 to (year, month), proleptic Gregorian (H. Hinnant's civil_from_days).
local function civil(days)
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return y, m
end

-- (year, month) to days since 1970-01-01 of its first day (days_from_civil).
local function first_day(y, m)
  if m <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = m > 2 and m - 3 or m + 9
  local doy = math.floor((153 * mp + 2) / 5)
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end

-- Index of the calendar period holding time t: days, or months since year 0.
local function period_of(alg, t)
  local day = math.floor(t / DAY_US)
  if alg == 'd' then return day end
  local y, m = civil(day)
  return y * 12 + m - 1
end

-- Start of calendar period p.
local function period_start(alg, p)
  if alg == 'd' then return p * DAY_US end
  local y = math.floor(p / 12)
  return first_day(y, p - y * 12 + 1) * DAY_US
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local HEADER, BUCKET = '<c1ddc0', '<c1ddddd'

-- Time until b is full (empty of admissions), and the level to report.
local function reset_of(b)
  if b.alg == 'c' then
    if b.last == nil then return 0 end
    return b.last - now
  elseif b.alg == 't' then
    if b.level >= b.cap then return 0 end
    return math.ceil((b.cap - b.level) * b.period / b.limit)
  elseif b.alg == 's' then
    if #b.slots == 0 then return 0 end
    return (b.slots[#b.slots][1] + SLOTS + 1) * b.w - now
  end
  return period_start(b.alg, b.p + 1) - now
end

local function remaining_of(b)
  if b.alg == 'c' then return b.cap - b.cnt end
  if b.alg == 't' then return math.floor(b.level + b.cap * EPS) end
  if b.alg == 's' then return b.cap - b.sum end
  return b.cap - b.used
end

-- Milliseconds to keep a bucket that is full again in live microseconds: live plus the margin.
local function ttl_ms(live)
  return math.ceil(live / 1000) + MARGIN_MS
end

-- Write b back (it changed) with its expiry, or delete it when it is full.
local function store(b)
  if b.alg == 't' then
    if b.level >= b.cap then
      redis.call('DEL', b.key)
    else
      redis.call('SET', b.key, struct.pack('<dd', b.level, b.ts), 'PX', ttl_ms(reset_of(b)))
    end
    return
  elseif b.alg == 'd' or b.alg == 'm' then
    if b.used <= 0 then
      redis.call('DEL', b.key)
    else
      -- A quota is full again once its debt is paid off: ceil(used / limit) periods ahead.
      local live = period_start(b.alg, b.p + math.ceil(b.used / b.limit)) - now
      redis.call('SET', b.key, struct.pack('<dd', b.used, b.p), 'PX', ttl_ms(live))
    end
    return
  elseif b.alg == 'c' then
    redis.call('ZREMRANGEBYSCORE', b.key, '-inf', num(now))
    if b.last == nil then
      redis.call('DEL', b.key)
      return
    end
  else
    if #b.stale > 0 then redis.call('HDEL', b.key, unpack(b.stale)) end
    if b.sum <= 0 then
      redis.call('DEL', b.key)
      return
    end
    local kept = {}
    for _, s in ipairs(b.slots) do
      if s[3] then
        if s[2] > 0 then
          redis.call('HSET', b.key, num(s[1]), num(s[2]))
        else
          redis.call('HDEL', b.key, num(s[1]))
        end
      end
      if s[2] > 0 then kept[#kept + 1] = s end
    end
    b.slots = kept
  end
  redis.call('PEXPIRE', b.key, ttl_ms(reset_of(b)))
end

-- Add amount to the sub-window holding time at (keeping slots sorted and marking it dirty).
local function slot_add(b, at, amount)
  local idx = math.floor(at / b.w)
  local pos = #b.slots + 1
  for x, s in ipairs(b.slots) do
    if s[1] == idx then
      s[2], s[3] = s[2] + amount, true
      b.sum = b.sum + amount
      return
    end
    if s[1] > idx then
      pos = x
      break
    end
  end
  table.insert(b.slots, pos, { idx, amount, true })
  b.sum = b.sum + amount
end

-- The level a provider's report is compared with, as remaining_of but unrounded.
local function level_of(b)
  if b.alg == 't' then return b.level end
  if b.alg == 's' then return b.cap - b.sum end
  return b.cap - b.used
end

-- One call: its n buckets are KEYS[base + 1 .. base + n], its argument args, whose header (op,
-- max_wait, lease) is read and whose buckets start at pos.
local function call(base, n, args, pos, op, max_wait, lease)
  -- Load every bucket as of now, without writing. The string-stored buckets are read together,
  -- once, by the first of them (MGET answers nil for the keys of other types).
  local bs = {}
  local strings
  local function load16(i)
    if strings == nil then strings = redis.call('MGET', unpack(KEYS, base + 1, base + n)) end
    local raw = strings[i]
    if raw and #raw == 16 then return struct.unpack('<dd', raw) end
    return nil
  end
  for i = 1, n do
    local alg, limit, period, cap, amount, reserve
    alg, limit, period, cap, amount, reserve, pos = struct.unpack(BUCKET, args, pos)
    -- Every field a token bucket uses, in the constructor: the table is sized once.
    local b = {
      key = KEYS[base + i], alg = alg, limit = limit, period = period, cap = cap, amount = amount,
      reserve = reserve, level = 0, ts = 0, wait = 0,
    }
    if b.alg == 't' then
      local level, ts = load16(i)
      if level == nil then
        b.level, b.ts = b.cap, now
      elseif now > ts then
        b.level, b.ts = level + (now - ts) * b.limit / b.period, now
      else
        b.level, b.ts = level, ts
      end
      if b.level > b.cap then b.level = b.cap end
    elseif b.alg == 's' then
      b.w = math.ceil(b.period / SLOTS)
      b.k = math.floor(now / b.w)
      b.slots, b.stale, b.sum = {}, {}, 0
      local raw = redis.call('HGETALL', b.key)
      for x = 1, #raw, 2 do
        local idx, c = tonumber(raw[x]), tonumber(raw[x + 1])
        if idx == nil or c == nil or idx < b.k - SLOTS then
          b.stale[#b.stale + 1] = raw[x]
        else
          b.slots[#b.slots + 1] = { idx, c }
          b.sum = b.sum + c
        end
      end
      table.sort(b.slots, function(p, q) return p[1] < q[1] end)
    elseif b.alg == 'd' or b.alg == 'm' then
      local used, p = load16(i)
      local cur = period_of(b.alg, now)
      if used == nil then
        b.used, b.p = 0, cur
      elseif p < cur then
        b.used, b.p = math.max(0, used - b.limit * (cur - p)), cur
      else
        b.used, b.p = used, p
      end
    elseif b.alg == 'c' then
      -- Live leases only: expired ones are still stored until the next write prunes them.
      local live = '(' .. num(now)
      b.cnt = redis.call('ZCOUNT', b.key, live, '+inf')
      local first = redis.call('ZRANGEBYSCORE', b.key, live, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
      b.first = tonumber(first[2])
      local last = redis.call('ZREVRANGE', b.key, 0, 0, 'WITHSCORES')
      b.last = tonumber(last[2])
      if b.last ~= nil and b.last <= now then b.last = nil end
      -- A lease taken again (a retried call) is renewed, not counted twice.
      local mine = tonumber(redis.call('ZSCORE', b.key, lease))
      b.mine = mine ~= nil and mine > now
      if b.mine then b.cnt = b.cnt - 1 end
    else
      return redis.error_reply('ERR bucket.lua: unknown algorithm ' .. tostring(b.alg))
    end
    bs[i] = b
  end

  if op == 'L' then
    for _, b in ipairs(bs) do
      if b.alg ~= 'c' then
        local d = level_of(b) - b.amount
        if d > 0 then
          if b.alg == 't' then
            b.level = b.amount
          elseif b.alg == 's' then
            slot_add(b, now, d)
          else
            b.used = b.used + d
          end
          store(b)
        end
      end
    end
    return n
  end

  if op == 'A' then
    for _, b in ipairs(bs) do
      local d = b.amount
      if b.alg == 'c' then
        if d > 0 and lease ~= '-' then
          redis.call('ZREM', b.key, lease)
        end
      elseif b.alg == 't' then
        b.level = b.level + d
        if b.level > b.cap then b.level = b.cap end
      elseif b.alg == 's' then
        if d < 0 then
          slot_add(b, now, -d)
        else
          -- A refund gives back the most recent admissions first.
          for x = #b.slots, 1, -1 do
            if d <= 0 then break end
            local s = b.slots[x]
            local take = math.min(s[2], d)
            s[2], s[3], d, b.sum = s[2] - take, true, d - take, b.sum - take
          end
        end
      else
        b.used = math.max(0, b.used - d)
      end
      if b.alg ~= 'c' then store(b) end
    end
    return n
  end

  -- Take: per-bucket wait (or impossibility), then one decision for all.
  local outcome, blocking, wait = 0, -1, 0
  for i, b in ipairs(bs) do
    local need = b.amount + b.reserve
    b.wait = 0
    if need > b.cap then
      if outcome ~= 3 then outcome, blocking = 3, i - 1 end
    elseif b.alg == 'c' then
      if b.cnt + need > b.cap then
        b.busy = true
        b.wait = BUSY_US
        if b.first ~= nil then b.wait = math.max(1, math.min(b.first - now, BUSY_US)) end
      end
    elseif b.alg == 't' then
      if b.level < need - b.cap * EPS then
        b.wait = math.ceil((need - b.level) * b.period / b.limit)
      end
    elseif b.alg == 's' then
      if b.sum + need > b.cap then
        -- Wait for the oldest sub-windows to leave the window until the cost fits.
        local left = b.sum
        for _, s in ipairs(b.slots) do
          left = left - s[2]
          if left + need <= b.cap then
            b.wait = (s[1] + SLOTS + 1) * b.w - now
            break
          end
        end
      end
    else
      if b.used + need > b.cap then
        local ahead = math.ceil((b.used + need - b.cap) / b.limit)
        b.wait = period_start(b.alg, b.p + ahead) - now
      end
    end
    if outcome ~= 3 and b.wait > wait then
      wait, blocking = b.wait, i - 1
    end
  end

  local busy = false
  for _, b in ipairs(bs) do
    if b.busy then busy = true end
  end
  if outcome ~= 3 and wait > 0 then
    if max_wait > 0 and wait <= max_wait and not busy then outcome = 1 else outcome = 2 end
  end
  if outcome == 3 then wait = 0 end

  if outcome <= 1 then
    for _, b in ipairs(bs) do
      if b.amount > 0 then
        if b.alg == 'c' then
          local exp = now + b.period
          redis.call('ZADD', b.key, num(exp), lease)
          b.cnt = b.cnt + 1
          if b.first == nil or exp < b.first then b.first = exp end
          if b.last == nil or exp > b.last then b.last = exp end
        elseif b.alg == 't' then
          b.level = b.level - b.amount
        elseif b.alg == 's' then
          -- Admitted as of when the caller proceeds, so it leaves the window a full period later.
          slot_add(b, now + wait, b.amount)
        else
          b.used = b.used + b.amount
        end
        store(b)
      end
    end
  end

  local reply = { struct.pack('<i8i8i8', outcome, blocking, wait) }
  for i, b in ipairs(bs) do
    reply[i + 1] = struct.pack('<i8i8i8i8', remaining_of(b), b.cap, reset_of(b), b.wait)
  end
  return table.concat(reply)
end

-- Read every call's header first: the calls' key counts must add up to #KEYS, or no call can be
-- told its keys.
local calls, base = {}, 0
for i, args in ipairs(ARGV) do
  if #args < 17 then
    return redis.error_reply('ERR bucket.lua: call ' .. i .. ': arguments of ' .. #args .. ' bytes')
  end
  local op, max_wait, lease, pos = struct.unpack(HEADER, args)
  local n = (#args - (pos - 1)) / 41
  if n < 1 or n ~= math.floor(n) then
    return redis.error_reply('ERR bucket.lua: call ' .. i .. ': ' .. #args .. ' bytes of arguments are no whole number of buckets')
  end
  calls[i] = { base, n, args, pos, op, max_wait, lease }
  base = base + n
end
if base ~= #KEYS then
  return redis.error_reply('ERR bucket.lua: the calls name ' .. base .. ' keys, got ' .. #KEYS)
end

-- Each call is decided on its own: an error in one (a key of the wrong type, say) is its own
-- reply and leaves the others alone.
local replies = {}
for i, c in ipairs(calls) do
  local ok, r = pcall(call, unpack(c))
  if ok then
    replies[i] = r
  elseif type(r) == 'table' and r.err then
    replies[i] = r
  else
    replies[i] = redis.error_reply('ERR bucket.lua: call ' .. i .. ': ' .. tostring(r))
  end
end
return replies
