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
-- KEYS        the keys of every call, call after call: a key per bucket, but one for the
--             buckets of a shared key next to each other; every key of a run shares one Redis
--             Cluster hash slot (the calls' tag).
-- ARGV[i]     call i, binary, read with struct.unpack (little-endian; numbers are doubles,
--             exact for the integers they carry): the header '<c1Bddc0' <op> <keys> <max_wait_us>
--             <lease>, then for each of its buckets '<c1ddddd' <alg> <limit> <period_us>
--             <capacity> <amount> <reserve>
--               op        T = take, A = adjust, L = lower, P = peek (read only: writes nothing,
--                         creates no key, changes no expiry); any other is the call's error
--               keys      how many of KEYS the call's buckets are in (token buckets may share one)
--               max_wait  take: the longest wait the caller accepts; adjust: the time a sliding
--                         window counted the charge being refunded (a take's at_us), 0 unknown;
--                         otherwise 0
--               lease     the in-flight lease id of the call's concurrency buckets, '-' for none
--               alg       t = token bucket, s = sliding window, d = daily quota, m = monthly quota,
--                         c = concurrency (period_us is the lease's time to live; for a quota it
--                         holds its zone's offsets, see zone below); 1 to 4 = a token
--                         bucket in that slot of a shared key (see Storage), the call's next key;
--                         5 to 8 = slot 1 to 4 of the previous bucket's key
--               amount    take: the cost (>= 0; a concurrency bucket: 0 or 1, one lease);
--                         adjust: the delta (> 0 refunds, < 0 charges; on a concurrency bucket
--                         > 0 releases the lease, <= 0 does nothing);
--                         lower: the remaining the provider reports; a bucket holding more is
--                         charged the difference, one holding less is left alone;
--                         peek: ignored (0)
--               reserve   floor x capacity: a take must leave at least this much
--             Binary rather than text: parsing decimal text in Lua was a sixth of the script's
--             CPU (docs/performance.md). The call's bucket count follows from the length.
--
-- Reply: an array with one reply per call, in order. A call's error (a key of another type, say)
-- is its own reply, an error; the other calls are decided all the same. Malformed arguments,
-- which leave the calls' keys unknown, fail the whole run.
-- Reply (take): 4 + 4 x n little-endian int64s in one string (struct '<i8...'; numbers are
-- truncated toward zero, as Redis truncates Lua numbers in replies), cheaper to build and to
-- read than an array of integers:
--   outcome, blocking, wait_us, at_us, then per bucket: remaining, capacity, reset_us, wait_us
--   outcome   0 allowed, 1 delayed (debited; proceed after wait_us), 2 denied (nothing debited;
--             retry after wait_us), 3 impossible (nothing debited; a cost exceeds capacity - reserve)
--   blocking  0-based index of the bucket with the longest wait (or the first impossible one), -1
--   at_us     the time the call counts at: now, plus wait_us when delayed (where a sliding window
--             counts the cost, and where an adjust's refund of it must land)
--   remaining the level after the call, rounded down (negative while in debt)
--   reset_us  time until the bucket is full again; for a quota, until the next period starts
--   wait_us   time until that bucket alone could pay; the top-level wait_us is their maximum
--             a concurrency bucket that is full denies even within max_wait (a lease cannot be
--             reserved ahead); its wait is the time until its oldest lease expires, at most BUSY_US
-- Reply (adjust, lower): the number of the call's buckets.
-- Reply (peek): 4 x n little-endian int64s in one string, per bucket: remaining, capacity,
--   reset_us (as in a take's reply), leases (a concurrency bucket's live leases, else 0).
--
-- Storage (one key per bucket, expiring once the bucket would be full again plus MARGIN_MS, a
-- token bucket up to SLACK_MS later; a missing key is a full bucket, and a write that leaves a
-- bucket full deletes its key):
--   token bucket   a 24-byte string, struct '<ddd': level, time of that level, the expiry the key
--                  was given; the 16 bytes '<dd' of earlier builds are read too, expiry unknown.
--                  Token buckets may share a key, each in its slot (a rule's tokens and requests:
--                  one key to read and write instead of two): slot 1 as above, then 16 bytes
--                  '<dd' level, time for each further slot, 24 + 16 x (slots - 1) bytes in all.
--                  A slot beyond the value, or holding level +inf, is a full bucket. The buckets of
--                  one key are independent (each its own level, time and parameters); a call
--                  writes the key once for all of its buckets there, keeping the slots it did not
--                  touch, and deletes it only when it holds nothing but full buckets of the call.
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

-- A zoned quota's zone offsets in microseconds, packed in its period by Go (validate.go
-- zoneOffsets, from the zone's rules, daylight saving included): the offset at the call's time,
-- and at the start of the next period. 0 is UTC.
local function zone(z)
  if z == 0 then return 0, 0 end
  local a = floor(z / 131072)
  return (a - 65536) * 1e6, (z - a * 131072 - 65536) * 1e6
end

-- Index of the calendar period holding time t in the zone z: local days, or months since year 0.
local function period_of(alg, t, z)
  local off = zone(z)
  local day = floor((t + off) / DAY_US)
  if alg == 'd' then return day end
  local y, m = civil(day)
  return y * 12 + m - 1
end

-- Start of calendar period p in the zone z (at the next period's offset).
local function period_start(alg, p, z)
  local _, off = zone(z)
  if alg == 'd' then return p * DAY_US - off end
  local y = floor(p / 12)
  return first_day(y, p - y * 12 + 1) * DAY_US - off
end

local HEADER, BUCKET = '<c1Bddc0', '<c1ddddd'

-- The buckets of the call being decided, by position 1..n; every call of the run reuses them,
-- and each call's load sets every field its buckets' algorithms read.
local KEY, ALG, LIMIT, PERIOD, CAP, AMOUNT, RESERVE, WAIT = {}, {}, {}, {}, {}, {}, {}, {}
local LEVEL, TS, EXPIRY = {}, {}, {}       -- token bucket: level, time of that level, key's expiry
local SLOT, DIRTY, KIDX = {}, {}, {}       -- token bucket in a shared key (g): its slot,
                                            -- whether it changed, its key's index in KEYS
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
  return period_start(alg, PIDX[i] + 1, PERIOD[i]) - now
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
  if alg == 't' or alg == 'g' then return LEVEL[i] end
  if alg == 's' then return CAP[i] - SUM[i] end
  return CAP[i] - USED[i]
end

-- Milliseconds to keep a bucket that is full again in live microseconds: live plus the margin.
local function ttl_ms(live)
  return ceil(live / 1000) + MARGIN_MS
end

-- The slot of a token bucket in a shared key by its alg digit: 1 to 4 in the call's next key,
-- negated for 5 to 8, in the previous bucket's key.
local SLOT_OF = { ['1'] = 1, ['2'] = 2, ['3'] = 3, ['4'] = 4, ['5'] = -1, ['6'] = -2, ['7'] = -3, ['8'] = -4 }

local HUGE = 1 / 0 -- the level of a slot no bucket wrote yet: full (math is not bound yet)

-- Write token bucket i (a key of its own) with its expiry, or delete it when it is full.
local function write_one(i)
  local key, level, cap = KEY[i], LEVEL[i], CAP[i]
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
end

-- Write token buckets i..j, which share one key (KEYS[k] is bucket i's), with one SET: each in
-- its slot, the key's other slots as stored. Delete the key instead when it would hold only full
-- buckets, all of them among i..j (the usual pair, or slot 1 alone).
local function write_tokens(i, j, k)
  local key = KEY[i]
  local raw = FRESH[key]
  if raw == nil then raw = RAW[k] end
  if j == i + 1 and SLOT[i] == 1 and SLOT[j] == 2 and (not raw or #raw <= 40) then
    -- The usual pair (a rule's tokens and requests), as write_one does one bucket.
    local l1, c1, l2, c2 = LEVEL[i], CAP[i], LEVEL[j], CAP[j]
    if l1 >= c1 and l2 >= c2 then
      rcall('DEL', key)
      FRESH[key] = false
      return
    end
    local need = 0
    if l1 < c1 then need = ceil((c1 - l1) * PERIOD[i] / LIMIT[i]) end
    if l2 < c2 then
      local w = ceil((c2 - l2) * PERIOD[j] / LIMIT[j])
      if w > need then need = w end
    end
    need = now + need + MARGIN_MS * 1000
    local expiry, v = EXPIRY[i], nil
    if not raw then expiry = 0 end -- deleted by this call (its buckets here were apart)
    if expiry >= need then
      v = spack('<ddddd', l1, TS[i], expiry, l2, TS[j])
      rcall('SET', key, v, 'KEEPTTL')
    else
      local px = ceil((need - now) / 1000) + SLACK_MS
      v = spack('<ddddd', l1, TS[i], now + px * 1000, l2, TS[j])
      rcall('SET', key, v, 'PX', px)
    end
    FRESH[key] = v
    return
  end
  local need, top = 0, 0
  for x = i, j do
    local level, cap = LEVEL[x], CAP[x]
    if level < cap then
      local w = ceil((cap - level) * PERIOD[x] / LIMIT[x])
      if w > need then need = w end
    end
    if SLOT[x] > top then top = SLOT[x] end
  end
  local len = raw and #raw or 0
  local ours = len == 16 or (len >= 24 and len % 16 == 8)
  local stored = 0 -- slots the value holds
  if len == 16 then stored = 1 elseif ours then stored = (len - 8) / 16 end
  if stored > top then top = stored end
  if top == 1 then
    -- Slot 1 alone, the key holding no other: as a key of its own. (No earlier write of this
    -- call deleted it: that would have been a write of slot 1 too.)
    write_one(i)
    return
  end
  -- Keep the key's expiry when it is late enough (KEEPTTL costs Redis half of PX); else set
  -- one SLACK_MS later than needed, so that a busy bucket sets it about once per SLACK_MS. The
  -- slots not among i..j need no more than the expiry they had, which the value records (this
  -- call may have written it already, when its buckets of one key are not next to each other).
  -- The key holds other slots, or will: it is never deleted here, but expires.
  local expiry = 0
  if len >= 24 and ours then expiry = sunpack('<d', raw, 17) end
  need = now + need + MARGIN_MS * 1000
  local px = nil
  if expiry < need then
    px = ceil((need - now) / 1000) + SLACK_MS
    expiry = now + px * 1000
  end
  -- Every slot among i..j (a rule's first windows, all of them): one pack of them all.
  if j - i + 1 == top and top <= 4 then
    local at = {}
    for x = i, j do at[SLOT[x]] = x end
    local a, b, c, d = at[1], at[2], at[3], at[4]
    if a and b and (top < 3 or c) and (top < 4 or d) then
      local v
      if top == 2 then
        v = spack('<ddddd', LEVEL[a], TS[a], expiry, LEVEL[b], TS[b])
      elseif top == 3 then
        v = spack('<ddddddd', LEVEL[a], TS[a], expiry, LEVEL[b], TS[b], LEVEL[c], TS[c])
      else
        v = spack('<ddddddddd', LEVEL[a], TS[a], expiry, LEVEL[b], TS[b], LEVEL[c], TS[c], LEVEL[d], TS[d])
      end
      if px then
        rcall('SET', key, v, 'PX', px)
      else
        rcall('SET', key, v, 'KEEPTTL')
      end
      FRESH[key] = v
      return
    end
  end
  -- Slot by slot, each from its bucket among i..j, or as stored, or full.
  local parts = {}
  for slot = 1, top do
    local part = nil
    for x = i, j do
      if SLOT[x] == slot then part = spack('<dd', LEVEL[x], TS[x]) end
    end
    if part == nil then
      if slot == 1 and ours then
        part = raw:sub(1, 16)
      elseif slot > 1 and slot <= stored then
        part = raw:sub(16 * slot - 7, 16 * slot + 8)
      else
        part = spack('<dd', HUGE, 0)
      end
    end
    parts[#parts + 1] = part
    if slot == 1 then parts[#parts + 1] = spack('<d', expiry) end
  end
  local v = table.concat(parts)
  if px then
    rcall('SET', key, v, 'PX', px)
  else
    rcall('SET', key, v, 'KEEPTTL')
  end
  FRESH[key] = v
end

-- Write the token buckets of a call that changed, one SET per key (its buckets are next to each
-- other in the call).
local function flush(n)
  local i = 1
  while i <= n do
    local j = i
    if ALG[i] == 'g' then
      local key, dirty = KEY[i], DIRTY[i]
      while j < n and KEY[j + 1] == key do
        j = j + 1
        if DIRTY[j] then dirty = true end
      end
      if dirty then write_tokens(i, j, KIDX[i]) end
    end
    i = j + 1
  end
end

-- Write bucket i back (it changed) with its expiry, or delete it when it is full. A token bucket
-- in a shared key is only marked: flush writes it, with the others of its key.
local function store(i)
  local alg, key = ALG[i], KEY[i]
  if alg == 't' then
    write_one(i)
    return
  elseif alg == 'g' then
    DIRTY[i] = true
    return
  elseif alg == 'd' or alg == 'm' then
    local used = USED[i]
    if used <= 0 then
      rcall('DEL', key)
      FRESH[key] = false
    else
      -- A quota is full again once its debt is paid off: ceil(used / limit) periods ahead.
      local live = period_start(alg, PIDX[i] + ceil(used / LIMIT[i]), PERIOD[i]) - now
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
    local cur = period_of(alg, now, PERIOD[i])
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

-- The calls of the run, from their headers: first key's index - 1, bucket count, key count,
-- argument, where its buckets start, op, max_wait, lease.
local CBASE, CN, CK, CPOS, COP, CWAIT, CLEASE = {}, {}, {}, {}, {}, {}, {}

-- Reply formats of a take by key count, built once each (a peek's of n buckets at -n).
local REPLY = {}
local OUT = {}

-- One call, ci, as its header says (see run): its n buckets are in KEYS[base + 1 .. base +
-- nkeys], each in the next key but for the buckets of a shared key after the first, in the
-- previous bucket's. (Arguments rather than reads of the header tables: a Lua 5.1 function has
-- at most 60 upvalues.)
local function call(ci, base, n, nkeys, pos, op, max_wait, lease)
  local args = ARGV[ci]
  local k = base -- the key of bucket i: KEYS[k]
  for i = 1, n do
    local alg
    alg, LIMIT[i], PERIOD[i], CAP[i], AMOUNT[i], RESERVE[i], pos = sunpack(BUCKET, args, pos)
    -- A token bucket, the common case, is loaded inline (a Lua call costs as much as the rest of
    -- it): level, time and expiry as stored, or nil when missing.
    local tb, level, ts, expiry = true, nil, nil, 0
    if alg == 't' then
      k = k + 1
      local key = KEYS[k]
      KEY[i] = key
      local raw = FRESH[key]
      if raw == nil then raw = RAW[k] end
      if raw then
        local len = #raw
        if len == 24 then
          level, ts, expiry = sunpack('<ddd', raw)
        elseif len == 16 then
          level, ts = sunpack('<dd', raw) -- an earlier build's: its expiry is unknown
        end
      end
    else
      local slot = SLOT_OF[alg]
      if slot == nil or slot > 0 then
        k = k + 1
      elseif i > 1 and ALG[i - 1] == 'g' then
        slot = -slot
      else
        return error_reply('ERR bucket.lua: bucket ' .. i .. ' shares the key of no token bucket')
      end
      local key = KEYS[k]
      KEY[i] = key
      if slot then
        alg = 'g'
        SLOT[i], DIRTY[i], KIDX[i] = slot, false, k
        local raw = FRESH[key]
        if raw == nil then raw = RAW[k] end
        if raw then
          local len = #raw
          if len >= 24 and len % 16 == 8 then
            if slot == 1 then
              level, ts, expiry = sunpack('<ddd', raw)
            else
              expiry = sunpack('<d', raw, 17)
              if len >= 16 * slot + 8 then level, ts = sunpack('<dd', raw, 16 * slot - 7) end
            end
          end
        end
      else
        tb = false
        ALG[i] = alg
        if not load(i, k, alg, lease) then
          return error_reply('ERR bucket.lua: unknown algorithm ' .. tostring(alg))
        end
      end
    end
    if tb then
      ALG[i] = alg
      local cap = CAP[i]
      if level == nil then
        level, ts = cap, now
      elseif now > ts then
        level, ts = level + (now - ts) * LIMIT[i] / PERIOD[i], now
      end
      if level > cap then level = cap end
      LEVEL[i], TS[i], EXPIRY[i] = level, ts, expiry
    end
  end
  if k ~= base + nkeys then
    return error_reply('ERR bucket.lua: ' .. (k - base) .. ' keys of ' .. nkeys .. ' named')
  end

  -- The other ops; a take, the request path, pays one comparison for them.
  if op ~= 'T' then
    if op == 'L' then
      for i = 1, n do
        if ALG[i] ~= 'c' then
          local d = level_of(i) - AMOUNT[i]
          if d > 0 then
            local alg = ALG[i]
            if alg == 't' or alg == 'g' then
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
      flush(n)
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
          if alg == 't' or alg == 'g' then
            local level = LEVEL[i] + d
            if level > CAP[i] then level = CAP[i] end
            LEVEL[i] = level
          elseif alg == 's' then
            if d < 0 then
              slot_add(i, now, -d)
            else
              -- A refund leaves the sub-window its charge was counted in (at, max_wait's
              -- place), then older ones, never a newer one: that would under-count the window
              -- once the charge's own sub-window leaves it. A charge whose sub-window has left
              -- the window already has nothing to give back. at unknown (0): the most recent
              -- sub-windows first.
              local subs, last = SUBS[i], nil
              if max_wait > 0 then last = floor(max_wait / SW[i]) end
              for x = #subs, 1, -1 do
                if d <= 0 then break end
                local s = subs[x]
                if last == nil or s[1] <= last then
                  local take = mmin(s[2], d)
                  s[2], s[3], d, SUM[i] = s[2] - take, true, d - take, SUM[i] - take
                end
              end
            end
          else
            USED[i] = mmax(0, USED[i] - d)
          end
          store(i)
        end
      end
      flush(n)
      return n
    end

    if op == 'P' then
      -- Each bucket as loaded, as of now; nothing is written.
      local o = 0
      for i = 1, n do
        local cap, alg = CAP[i], ALG[i]
        if alg == 't' or alg == 'g' then
          local level, reset = LEVEL[i], 0
          if level < cap then reset = ceil((cap - level) * PERIOD[i] / LIMIT[i]) end
          OUT[o + 1], OUT[o + 2], OUT[o + 3], OUT[o + 4] = floor(level + cap * EPS), cap, reset, 0
        else
          local held = 0
          if alg == 'c' then held = CNT[i] end
          OUT[o + 1], OUT[o + 2], OUT[o + 3], OUT[o + 4] = remaining_of(i), cap, reset_of(i), held
        end
        o = o + 4
      end
      local format = REPLY[-n]
      if format == nil then
        format = '<' .. string.rep('i8', o)
        REPLY[-n] = format
      end
      return spack(format, unpack(OUT, 1, o))
    end
    return error_reply('ERR bucket.lua: unknown op ' .. tostring(op))
  end

  -- Take: per-bucket wait (or impossibility), then one decision for all.
  local outcome, blocking, wait, busy = 0, -1, 0, false
  for i = 1, n do
    local alg, cap = ALG[i], CAP[i]
    local need = AMOUNT[i] + RESERVE[i]
    local w = 0
    if need > cap then
      if outcome ~= 3 then outcome, blocking = 3, i - 1 end
    elseif alg == 't' or alg == 'g' then
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
        w = period_start(alg, PIDX[i] + ahead, PERIOD[i]) - now
      end
    end
    WAIT[i] = w
    if outcome ~= 3 and w > wait then
      wait, blocking = w, i - 1
    end
  end

  if outcome ~= 3 and wait > 0 then
    if max_wait > 0 and wait <= max_wait and not busy then outcome = 1 else outcome = 2 end
  end
  if outcome == 3 then wait = 0 end

  if outcome <= 1 then
    local shared = false
    for i = 1, n do
      local amount = AMOUNT[i]
      if amount > 0 then
        local alg = ALG[i]
        if alg == 't' then
          LEVEL[i] = LEVEL[i] - amount
          write_one(i)
        elseif alg == 'g' then
          LEVEL[i], DIRTY[i], shared = LEVEL[i] - amount, true, true
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
        if alg ~= 't' and alg ~= 'g' then store(i) end
      end
    end
    if shared then flush(n) end
  end

  local at = now
  if outcome == 1 then at = now + wait end
  OUT[1], OUT[2], OUT[3], OUT[4] = outcome, blocking, wait, at
  local o = 4
  for i = 1, n do
    local cap, alg = CAP[i], ALG[i]
    if alg == 't' or alg == 'g' then
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
    if #args < 18 then
      return error_reply('ERR bucket.lua: call ' .. i .. ': arguments of ' .. #args .. ' bytes')
    end
    local op, nkeys, max_wait, lease, pos = sunpack(HEADER, args)
    local n = (#args - (pos - 1)) / 41
    if n < 1 or n ~= floor(n) then
      return error_reply('ERR bucket.lua: call ' .. i .. ': ' .. #args .. ' bytes of arguments are no whole number of buckets')
    end
    CBASE[i], CN[i], CK[i], CPOS[i], COP[i], CWAIT[i], CLEASE[i] = base, n, nkeys, pos, op, max_wait, lease
    base = base + nkeys
  end
  if base ~= #KEYS then
    return error_reply('ERR bucket.lua: the calls name ' .. base .. ' keys, got ' .. #KEYS)
  end
  if base > 0 then RAW = rcall('MGET', unpack(KEYS)) end

  -- Each call is decided on its own: an error in one (a key of the wrong type, say) is its own
  -- reply and leaves the others alone.
  local replies = {}
  for i = 1, #ARGV do
    local ok, r = pcall(call, i, CBASE[i], CN[i], CK[i], CPOS[i], COP[i], CWAIT[i], CLEASE[i])
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
