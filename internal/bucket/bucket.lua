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
-- Storage (one key per bucket, expiring once the bucket would be full again plus MARGIN_MS, a
-- token bucket up to SLACK_MS later; a missing key is a full bucket, and a write that leaves a
-- bucket full deletes its key):
--   token bucket   a 24-byte string, struct '<ddd': level, time of that level, the expiry the key
--                  was given; the 16 bytes '<dd' of earlier builds are read too, expiry unknown
--   quota          a 16-byte string, struct '<dd': amount used (above limit: debt carried into the
--                  next periods), period index
--   sliding window a hash: <sub-window index> = amount admitted in that sub-window
--   concurrency    a sorted set: lease id -> expiry time; expired leases are pruned on write
-- The two-number buckets are strings so that one MGET reads all of them and one SET ... PX writes
-- each with its expiry: a hash took an HMGET per bucket and an HSET and a PEXPIRE per write, and
-- its numbers as decimal text (docs/performance.md). A string key of any other length (not
-- written by this script) reads as a full bucket and is overwritten by the next write.
-- A token bucket's key gets an expiry SLACK_MS later than it needs, and its value records it: a
-- later write whose need it covers keeps it (SET ... KEEPTTL), so a busy bucket sets one about
-- once per SLACK_MS. SET ... PX costs Redis about twice as much, its number formatted as text.
--
-- Cost: Redis runs this for every decision on its one thread, in Lua 5.1, where a table costs
-- thousands of instructions and each redis.call, struct call or global lookup hundreds. So one
-- MGET reads the string-stored buckets of the whole run; the buckets of the call being decided
-- live in arrays by position that every call reuses, not in a table each; a take's reply is one
-- struct.pack; the libraries are locals. Loaded as a function library (library.go), the top level
-- below (the helpers and those arrays) runs once, when the library loads; as a script, on every
-- run. scripts/script-cost.sh counts the instructions (docs/performance.md has the figures).

local SLOTS = 10        -- sub-windows per sliding window
local MARGIN_MS = 1000  -- expiry margin
local SLACK_MS = 10000  -- how much later than needed a token bucket's expiry is set
local DAY_US = 86400000000
local EPS = 1e-14       -- float tolerance, relative to capacity (token bucket only)
local BUSY_US = 1000000 -- longest wait advertised by a full concurrency bucket

-- Libraries and the run's arguments, bound by run: a function library may not touch them while
-- it loads.
local rcall, error_reply, spack, sunpack, floor, ceil, mmax, mmin
local unpack, tonumber, tostring, pcall, type
local KEYS, ARGV, now

local function num(x)
  return string.format('%.17g', x)
end

-- Days since 1970-01-01 to (year, month), proleptic Gregorian (H. Hinnant's civil_from_days).
local function civil(days)
  local z = days + 719468
  local era = floor(z / 146097)
  local doe = z - era * 146097
  local yoe = floor((doe - floor(doe / 1460) + floor(doe / 36524) - floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + floor(yoe / 4) - floor(yoe / 100))
  local mp = floor((5 * doy + 2) / 153)
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return y, m
end

-- (year, month) to days since 1970-01-01 of its first day (days_from_civil).
local function first_day(y, m)
  if m <= 2 then y = y - 1 end
  local era = floor(y / 400)
  local yoe = y - era * 400
  local mp = m > 2 and m - 3 or m + 9
  local doy = floor((153 * mp + 2) / 5)
  local doe = yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end

-- Index of the calendar period holding time t: days, or months since year 0.
local function period_of(alg, t)
  local day = floor(t / DAY_US)
  if alg == 'd' then return day end
  local y, m = civil(day)
  return y * 12 + m - 1
end

-- Start of calendar period p.
local function period_start(alg, p)
  if alg == 'd' then return p * DAY_US end
  local y = floor(p / 12)
  return first_day(y, p - y * 12 + 1) * DAY_US
end

local HEADER, BUCKET = '<c1ddc0', '<c1ddddd'

-- The buckets of the call being decided, by position 1..n; every call of the run reuses them,
-- and each call's load sets every field its buckets' algorithms read.
local KEY, ALG, LIMIT, PERIOD, CAP, AMOUNT, RESERVE, WAIT = {}, {}, {}, {}, {}, {}, {}, {}
local LEVEL, TS, EXPIRY = {}, {}, {}       -- token bucket: level, time of that level, key's expiry
local USED, PIDX = {}, {}                   -- quota: amount used, period index
local SW, SUBS, STALE, SUM = {}, {}, {}, {} -- sliding window: sub-window length, { index,
                                            -- amount, dirty } sorted, stale fields, total
local CNT, FIRST, LAST, MINE = {}, {}, {}, {} -- concurrency: live leases, earliest and latest
                                              -- expiry (nil: none), whether the call's lease is one

-- RAW holds every key's value as the run's MGET read it (false: missing or not a string);
-- FRESH, the value a call of this run wrote since (false: deleted), which later calls read first.
local RAW, FRESH

-- A quota's two numbers, or nil when it is missing or not written by this script.
local function load16(key, k)
  local raw = FRESH[key]
  if raw == nil then raw = RAW[k] end
  if raw and #raw == 16 then return sunpack('<dd', raw) end
  return nil
end

-- Time until bucket i is full (empty of admissions); a token bucket's is inline in call and store.
local function reset_of(i)
  local alg = ALG[i]
  if alg == 'c' then
    if LAST[i] == nil then return 0 end
    return LAST[i] - now
  elseif alg == 's' then
    local subs = SUBS[i]
    if #subs == 0 then return 0 end
    return (subs[#subs][1] + SLOTS + 1) * SW[i] - now
  end
  return period_start(alg, PIDX[i] + 1) - now
end

-- The level of bucket i to report, rounded down; a token bucket's is inline in call.
local function remaining_of(i)
  local alg = ALG[i]
  if alg == 'c' then return CAP[i] - CNT[i] end
  if alg == 's' then return CAP[i] - SUM[i] end
  return CAP[i] - USED[i]
end

-- The level a provider's report is compared with, as remaining_of but unrounded.
local function level_of(i)
  local alg = ALG[i]
  if alg == 't' then return LEVEL[i] end
  if alg == 's' then return CAP[i] - SUM[i] end
  return CAP[i] - USED[i]
end

-- Milliseconds to keep a bucket that is full again in live microseconds: live plus the margin.
local function ttl_ms(live)
  return ceil(live / 1000) + MARGIN_MS
end

-- Write bucket i back (it changed) with its expiry, or delete it when it is full.
local function store(i)
  local alg, key = ALG[i], KEY[i]
  if alg == 't' then
    local level, cap = LEVEL[i], CAP[i]
    if level >= cap then
      rcall('DEL', key)
      FRESH[key] = false
      return
    end
    -- Keep the key's expiry when it is late enough (KEEPTTL costs Redis half of PX); else set
    -- one SLACK_MS later than needed, so that a busy bucket sets it about once per SLACK_MS.
    local need = now + ceil((cap - level) * PERIOD[i] / LIMIT[i]) + MARGIN_MS * 1000
    local expiry, v = EXPIRY[i], nil
    if expiry >= need then
      v = spack('<ddd', level, TS[i], expiry)
      rcall('SET', key, v, 'KEEPTTL')
    else
      local px = ceil((need - now) / 1000) + SLACK_MS
      expiry = now + px * 1000
      v = spack('<ddd', level, TS[i], expiry)
      rcall('SET', key, v, 'PX', px)
      EXPIRY[i] = expiry
    end
    FRESH[key] = v
    return
  elseif alg == 'd' or alg == 'm' then
    local used = USED[i]
    if used <= 0 then
      rcall('DEL', key)
      FRESH[key] = false
    else
      -- A quota is full again once its debt is paid off: ceil(used / limit) periods ahead.
      local live = period_start(alg, PIDX[i] + ceil(used / LIMIT[i])) - now
      local v = spack('<dd', used, PIDX[i])
      rcall('SET', key, v, 'PX', ttl_ms(live))
      FRESH[key] = v
    end
    return
  elseif alg == 'c' then
    rcall('ZREMRANGEBYSCORE', key, '-inf', num(now))
    if LAST[i] == nil then
      rcall('DEL', key)
      return
    end
  else
    local stale = STALE[i]
    if #stale > 0 then rcall('HDEL', key, unpack(stale)) end
    if SUM[i] <= 0 then
      rcall('DEL', key)
      return
    end
    local kept = {}
    for _, s in ipairs(SUBS[i]) do
      if s[3] then
        if s[2] > 0 then
          rcall('HSET', key, num(s[1]), num(s[2]))
        else
          rcall('HDEL', key, num(s[1]))
        end
      end
      if s[2] > 0 then kept[#kept + 1] = s end
    end
    SUBS[i] = kept
  end
  rcall('PEXPIRE', key, ttl_ms(reset_of(i)))
end

-- Add amount to sliding window i's sub-window holding time at (keeping them sorted, marking it
-- dirty).
local function slot_add(i, at, amount)
  local subs = SUBS[i]
  local idx = floor(at / SW[i])
  local pos = #subs + 1
  for x, s in ipairs(subs) do
    if s[1] == idx then
      s[2], s[3] = s[2] + amount, true
      SUM[i] = SUM[i] + amount
      return
    end
    if s[1] > idx then
      pos = x
      break
    end
  end
  table.insert(subs, pos, { idx, amount, true })
  SUM[i] = SUM[i] + amount
end

local function by_index(p, q) return p[1] < q[1] end

-- Load bucket i, KEYS[k], as of now, without writing; false for an unknown algorithm. Token
-- buckets, the common case, are loaded inline in call.
local function load(i, k, alg, lease)
  local key = KEY[i]
  if alg == 's' then
    local w = ceil(PERIOD[i] / SLOTS)
    local oldest = floor(now / w) - SLOTS
    local subs, stale, sum = {}, {}, 0
    local raw = rcall('HGETALL', key)
    for x = 1, #raw, 2 do
      local idx, c = tonumber(raw[x]), tonumber(raw[x + 1])
      if idx == nil or c == nil or idx < oldest then
        stale[#stale + 1] = raw[x]
      else
        subs[#subs + 1] = { idx, c }
        sum = sum + c
      end
    end
    table.sort(subs, by_index)
    SW[i], SUBS[i], STALE[i], SUM[i] = w, subs, stale, sum
  elseif alg == 'd' or alg == 'm' then
    local used, p = load16(key, k)
    local cur = period_of(alg, now)
    if used == nil then
      used, p = 0, cur
    elseif p < cur then
      used, p = mmax(0, used - LIMIT[i] * (cur - p)), cur
    end
    USED[i], PIDX[i] = used, p
  elseif alg == 'c' then
    -- Live leases only: expired ones are still stored until the next write prunes them.
    local live = '(' .. num(now)
    local cnt = rcall('ZCOUNT', key, live, '+inf')
    local first = rcall('ZRANGEBYSCORE', key, live, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    FIRST[i] = tonumber(first[2])
    local last = tonumber(rcall('ZREVRANGE', key, 0, 0, 'WITHSCORES')[2])
    if last ~= nil and last <= now then last = nil end
    LAST[i] = last
    -- A lease taken again (a retried call) is renewed, not counted twice.
    local mine = tonumber(rcall('ZSCORE', key, lease))
    MINE[i] = mine ~= nil and mine > now
    if MINE[i] then cnt = cnt - 1 end
    CNT[i] = cnt
  else
    return false
  end
  return true
end

-- The calls of the run, from their headers: first key's index - 1, key count, argument, where its
-- buckets start, op, max_wait, lease.
local CBASE, CN, CPOS, COP, CWAIT, CLEASE = {}, {}, {}, {}, {}, {}

-- Reply formats of a take by key count, built once each.
local REPLY = {}
local OUT = {}

-- One call, ci: its n buckets are KEYS[base + 1 .. base + n].
local function call(ci)
  local base, n, args, pos, op, lease = CBASE[ci], CN[ci], ARGV[ci], CPOS[ci], COP[ci], CLEASE[ci]
  for i = 1, n do
    local alg
    alg, LIMIT[i], PERIOD[i], CAP[i], AMOUNT[i], RESERVE[i], pos = sunpack(BUCKET, args, pos)
    local key = KEYS[base + i]
    KEY[i], ALG[i] = key, alg
    if alg == 't' then
      -- The common case, inline (a Lua call costs as much as the rest of it).
      local raw = FRESH[key]
      if raw == nil then raw = RAW[base + i] end
      local cap, level, ts, expiry = CAP[i], nil, nil, 0
      if raw then
        local len = #raw
        if len == 24 then
          level, ts, expiry = sunpack('<ddd', raw)
        elseif len == 16 then
          level, ts = sunpack('<dd', raw) -- an earlier build's: its expiry is unknown
        end
      end
      if level == nil then
        level, ts = cap, now
      elseif now > ts then
        level, ts = level + (now - ts) * LIMIT[i] / PERIOD[i], now
      end
      if level > cap then level = cap end
      LEVEL[i], TS[i], EXPIRY[i] = level, ts, expiry
    elseif not load(i, base + i, alg, lease) then
      return error_reply('ERR bucket.lua: unknown algorithm ' .. tostring(alg))
    end
  end

  if op == 'L' then
    for i = 1, n do
      if ALG[i] ~= 'c' then
        local d = level_of(i) - AMOUNT[i]
        if d > 0 then
          local alg = ALG[i]
          if alg == 't' then
            LEVEL[i] = AMOUNT[i]
          elseif alg == 's' then
            slot_add(i, now, d)
          else
            USED[i] = USED[i] + d
          end
          store(i)
        end
      end
    end
    return n
  end

  if op == 'A' then
    for i = 1, n do
      local alg, d = ALG[i], AMOUNT[i]
      if alg == 'c' then
        if d > 0 and lease ~= '-' then
          rcall('ZREM', KEY[i], lease)
        end
      else
        if alg == 't' then
          local level = LEVEL[i] + d
          if level > CAP[i] then level = CAP[i] end
          LEVEL[i] = level
        elseif alg == 's' then
          if d < 0 then
            slot_add(i, now, -d)
          else
            -- A refund gives back the most recent admissions first.
            local subs = SUBS[i]
            for x = #subs, 1, -1 do
              if d <= 0 then break end
              local s = subs[x]
              local take = mmin(s[2], d)
              s[2], s[3], d, SUM[i] = s[2] - take, true, d - take, SUM[i] - take
            end
          end
        else
          USED[i] = mmax(0, USED[i] - d)
        end
        store(i)
      end
    end
    return n
  end

  -- Take: per-bucket wait (or impossibility), then one decision for all.
  local outcome, blocking, wait, busy = 0, -1, 0, false
  for i = 1, n do
    local alg, cap = ALG[i], CAP[i]
    local need = AMOUNT[i] + RESERVE[i]
    local w = 0
    if need > cap then
      if outcome ~= 3 then outcome, blocking = 3, i - 1 end
    elseif alg == 't' then
      local level = LEVEL[i]
      if level < need - cap * EPS then
        w = ceil((need - level) * PERIOD[i] / LIMIT[i])
      end
    elseif alg == 'c' then
      if CNT[i] + need > cap then
        busy = true
        w = BUSY_US
        if FIRST[i] ~= nil then w = mmax(1, mmin(FIRST[i] - now, BUSY_US)) end
      end
    elseif alg == 's' then
      local sum = SUM[i]
      if sum + need > cap then
        -- Wait for the oldest sub-windows to leave the window until the cost fits.
        local left = sum
        for _, s in ipairs(SUBS[i]) do
          left = left - s[2]
          if left + need <= cap then
            w = (s[1] + SLOTS + 1) * SW[i] - now
            break
          end
        end
      end
    else
      if USED[i] + need > cap then
        local ahead = ceil((USED[i] + need - cap) / LIMIT[i])
        w = period_start(alg, PIDX[i] + ahead) - now
      end
    end
    WAIT[i] = w
    if outcome ~= 3 and w > wait then
      wait, blocking = w, i - 1
    end
  end

  if outcome ~= 3 and wait > 0 then
    if CWAIT[ci] > 0 and wait <= CWAIT[ci] and not busy then outcome = 1 else outcome = 2 end
  end
  if outcome == 3 then wait = 0 end

  if outcome <= 1 then
    for i = 1, n do
      local amount = AMOUNT[i]
      if amount > 0 then
        local alg = ALG[i]
        if alg == 't' then
          LEVEL[i] = LEVEL[i] - amount
        elseif alg == 'c' then
          local exp = now + PERIOD[i]
          rcall('ZADD', KEY[i], num(exp), lease)
          CNT[i] = CNT[i] + 1
          if FIRST[i] == nil or exp < FIRST[i] then FIRST[i] = exp end
          if LAST[i] == nil or exp > LAST[i] then LAST[i] = exp end
        elseif alg == 's' then
          -- Admitted as of when the caller proceeds, so it leaves the window a full period later.
          slot_add(i, now + wait, amount)
        else
          USED[i] = USED[i] + amount
        end
        store(i)
      end
    end
  end

  OUT[1], OUT[2], OUT[3] = outcome, blocking, wait
  local o = 3
  for i = 1, n do
    local cap = CAP[i]
    if ALG[i] == 't' then
      local level, reset = LEVEL[i], 0
      if level < cap then reset = ceil((cap - level) * PERIOD[i] / LIMIT[i]) end
      OUT[o + 1], OUT[o + 2], OUT[o + 3], OUT[o + 4] = floor(level + cap * EPS), cap, reset, WAIT[i]
    else
      OUT[o + 1], OUT[o + 2], OUT[o + 3], OUT[o + 4] = remaining_of(i), cap, reset_of(i), WAIT[i]
    end
    o = o + 4
  end
  local format = REPLY[n]
  if format == nil then
    format = '<' .. string.rep('i8', o)
    REPLY[n] = format
  end
  return spack(format, unpack(OUT, 1, o))
end

-- One script run: every call of keys and args, decided in order. The function library calls it
-- (FCALL); as a script (EVALSHA), the source ends with "return run(_G.KEYS, _G.ARGV)".
local function run(keys, argv)
  rcall, error_reply = redis.call, redis.error_reply
  spack, sunpack = struct.pack, struct.unpack
  floor, ceil, mmax, mmin = math.floor, math.ceil, math.max, math.min
  unpack, tonumber, tostring, pcall, type = _G.unpack, _G.tonumber, _G.tostring, _G.pcall, _G.type
  KEYS, ARGV = keys, argv
  local t = rcall('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  RAW, FRESH = nil, {}

  -- Read every call's header first: the calls' key counts must add up to #KEYS, or no call can be
  -- told its keys.
  local base = 0
  for i = 1, #ARGV do
    local args = ARGV[i]
    if #args < 17 then
      return error_reply('ERR bucket.lua: call ' .. i .. ': arguments of ' .. #args .. ' bytes')
    end
    local op, max_wait, lease, pos = sunpack(HEADER, args)
    local n = (#args - (pos - 1)) / 41
    if n < 1 or n ~= floor(n) then
      return error_reply('ERR bucket.lua: call ' .. i .. ': ' .. #args .. ' bytes of arguments are no whole number of buckets')
    end
    CBASE[i], CN[i], CPOS[i], COP[i], CWAIT[i], CLEASE[i] = base, n, pos, op, max_wait, lease
    base = base + n
  end
  if base ~= #KEYS then
    return error_reply('ERR bucket.lua: the calls name ' .. base .. ' keys, got ' .. #KEYS)
  end
  if base > 0 then RAW = rcall('MGET', unpack(KEYS)) end

  -- Each call is decided on its own: an error in one (a key of the wrong type, say) is its own
  -- reply and leaves the others alone.
  local replies = {}
  for i = 1, #ARGV do
    local ok, r = pcall(call, i)
    if ok then
      replies[i] = r
    elseif type(r) == 'table' and r.err then
      replies[i] = r
    else
      replies[i] = error_reply('ERR bucket.lua: call ' .. i .. ': ' .. tostring(r))
    end
  end
  return replies
end
