// Package bucket keeps the shared LLM budgets: it debits all of a request's buckets (a model's
// tokens and requests per minute, a tenant's tokens, a provider-wide or spend cap) atomically, or
// none of them, in one Redis round trip, for any number of ext-authz replicas.
//
// It owns the budget algorithms, the Lua script that runs them in Redis (bucket.lua), the key
// layout, the Redis client construction (NewClient) and two stores with identical semantics:
// Redis (at most one FCALL per decision, on a single node, a Sentinel-managed master or a Redis Cluster)
// and Memory (in process, the embedded default for one replica). The Redis store also owns the
// replicas' heartbeat (Heartbeat, Leave, heartbeat.lua and its key, PREFIX + "replicas"), by
// which replicas sharing it count each other, and the reload of a Cluster's slot map
// (ReloadTopology): callers never reach for the client behind it. It returns concrete types and
// must never import internal/filter (which declares the interface it needs) nor any wire protocol.
//
// # Decisions
//
// Take checks every bucket of a Request and, only if all can pay, debits them all. The Result is
// Allowed; Delayed (every bucket paid in advance, the caller waits Result.Wait: a reservation
// within Request.MaxWait, first come first served by construction since each reservation puts the
// bucket further into debt, no polling and no second call); Denied (nothing debited; Result.Wait
// is the exact time until every bucket could pay, the largest per-bucket wait, so a retry after
// it succeeds unless someone else took the tokens); or Impossible (nothing debited: a cost exceeds
// a bucket's capacity above its floor and no wait will help). Each bucket's State reports its
// level after the call, its capacity, the time until it is full again (for a quota, until its
// period resets) and its own wait. Over the limit is a Result, never an error.
//
// A Spec's Floor (0 to 1) reserves Floor x capacity: the request is admitted only if the bucket
// keeps at least that much after paying, so that low-priority traffic cannot starve user-facing
// traffic that takes the same bucket with a floor of 0. A bucket in debt admits nothing, not even
// a zero cost, until the debt is repaid.
//
// Adjust corrects buckets after the fact, for reconciliation with the usage a provider reports:
// a positive Delta refunds (never above capacity), a negative one charges extra (into debt). A
// sliding window's refund leaves the sub-window the cost was counted in (Adjustment.At, the
// take's Result.At) and never a newer one, so that what stays counted leaves the window when the
// cost would have.
// Lower applies a provider's own report: a bucket holding more than the provider says remains is
// charged the difference, one holding less is left alone, so a report never raises a bucket (and
// never above its configured limit). A provider 429 with retry-after r pauses a token bucket for
// every replica by lowering it to c - r x rate: no request of cost c fits before r has passed.
//
// Peek reads buckets for an operator (the admin API) without writing anything: no key is created,
// no value or expiry changes; it is a call of its own (bucket.lua's op P), never part of a
// decision's. Reset makes buckets full by deleting their keys (a shared key's other slots with
// them).
//
// A Concurrency bucket caps requests in flight: each admitted request holds a lease
// (Request.Lease, one sorted-set member scored by its expiry) until Adjust releases it or its
// time to live (the Spec's Period, set to the route timeout) passes, so a release that never
// comes (a crashed replica, a lost response) frees the slot on its own. It is checked and taken
// in the same atomic call as the request's token buckets; a full one denies even within
// MaxWait, advertising the time until its oldest lease expires, at most one second.
//
// # Algorithms and units
//
// Time is in microseconds, from the Redis server's TIME (never the caller's clock; the Memory store
// uses its injected clock). Amounts (Limit, Burst, Cost, Delta) are integers up to MaxAmount
// (1e12); periods run from 1 s to 31 days. Waits are rounded up to the microsecond, levels down to
// the token.
//
//   - TokenBucket (the default): capacity Burst (or Limit), refilled continuously at Limit per
//     Period. The state is the level, a double, and the time of that level. The refill is computed
//     as elapsed x Limit / Period in doubles, exact to about 1e-16 relative, so a 1e9-token cost,
//     a 1e12-token burst or a 31-day period are all exact to well below a token and a
//     microsecond; comparisons allow 1e-14 x capacity of rounding. Levels are stored as the double's 8
//     bytes, which read back bit for bit.
//   - SlidingWindow: at most Limit in any rolling Period, approximated with SlidingWindows (10)
//     sub-windows of Period/10. A decision counts every sub-window that overlaps the last Period,
//     so it never admits more than Limit in any rolling Period; the error is one-sided: an
//     admission leaves the window between Period and Period + Period/10 after it was made, so a
//     wait can be up to Period/10 longer than an exact log's. Tests check both bounds against an
//     exact log. A reservation is counted in the sub-window where it proceeds (Result.At), and
//     refunded there.
//   - Quota: at most Limit per calendar period, UTC day or month, reset at the boundary (civil
//     dates computed in the script, valid to the year 2255). Debt carries over: a quota charged
//     beyond its limit starts the next periods with the excess, and a reservation may be denied
//     until the period in which it fits. A Delayed request is charged to the period in which it
//     was decided.
//
// # Keys and Redis Cluster
//
// A bucket is one small key at
//
//	<prefix>{<tag>}<alg>:<name>      e.g.  rl:{openai}T:tenant-42:gpt-4o:tpm
//
// where alg is T, s, D, M or c (token bucket, sliding window, daily or monthly quota, concurrency), so a bucket
// whose algorithm changes starts afresh instead of misreading the other's state. A token bucket
// or a quota is a short string of doubles (read with one MGET for all the buckets of a script
// run, written with SET), a sliding window a hash, a concurrency bucket a sorted set.
//
// Token buckets with a Spec.Slot share the key G:<name>, each in its slot (a rule's tokens and
// requests: slots 1 and 2). A decision that debits both reads and writes one key instead of two,
// and a rule and tenant take one key instead of two. The buckets stay independent (each its own
// level, time and parameters, the same results as under keys of their own); a call that touches
// some slots keeps the others as stored. A change of storage gets new key names, so that no build
// misreads another's state (docs/operations.md, upgrading across a change of storage).
//
// The hash tag is the Request's Tag: every key of a decision hashes to one Cluster slot, which the
// atomic script requires (a cross-slot script is refused). The tag should be the provider (openai,
// anthropic...): the provider-wide buckets then live with the tenants' and models' buckets they are
// checked with. The price is a hot spot: all of one provider's traffic goes to one shard, which
// runs scripts one at a time (BenchmarkRedis measures a shard's decisions a second against a bare
// EVALSHA); adding shards does not raise one provider's ceiling. A deployment without provider-wide
// buckets can tag by tenant instead to spread the load.
//
// Tags and names are user-controlled (tenant ids, model names) and are encoded so that they
// cannot break the hash tag nor collide: bytes outside [A-Za-z0-9] and -_.:/@+=~!*(),;$&' become
// %XX (so '{', '}', '%', '#', spaces and newlines never appear raw), the empty string becomes "%"
// (an empty hash tag "{}" would make Redis hash the whole key), and a part whose escaped form
// exceeds 64 bytes becomes '#' and 128 bits of its SHA-256 in hex, bounding key length for a
// 10 KB tenant id. The three forms cannot collide with each other. Braces in the prefix are
// escaped too.
//
// # Storage and expiry
//
// A key expires once its bucket would be full again, plus a 1 s margin; a missing key is a full
// bucket, so a bucket re-created from nothing starts full, and a write that leaves a bucket full
// deletes its key (a shared key: when every bucket in it is full and in the call). Denials and
// zero-cost decisions write nothing. A token bucket's key is given an expiry 10 s later than it
// needs and keeps it through the writes that need no later one (SET ... KEEPTTL, half the cost of
// setting an expiry), so it may outlive its full bucket by up to 11 s. Its value records that
// expiry (24 bytes); a 16-byte value, without it, is read too and rewritten as 24. The memory each
// kind of key takes is in docs/operations.md.
//
// With RedisOptions.MaxBatch, the script calls of concurrent decisions are coalesced into
// pipelines: one write and one read per batch on both sides, which is what a CPU-bound machine
// pays for most, and one FCALL per tag in the batch, whose run decides that tag's calls
// one after the other, each atomically and on its own (one call's error is its own reply). A call
// whose context has ended before its pipeline is sent is never sent; a timeout or a lost
// connection fails every call of the pipeline it hit.
//
// bucket.lua is loaded as a function library (Redis 7 and later) and called with FCALL: its top
// level, which a script would run on every call, runs once when it loads. Where the function
// cannot run (a server before Redis 7, an ACL denying FUNCTION or FCALL, a node that lost its
// functions), the same code runs as a script, with EVALSHA and then EVAL, and a node that lost
// the library gets it again (library.go). Callers never see either. The library's name carries a
// hash of its code, so that replicas of two builds each call their own during a rolling upgrade;
// earlier versions stay loaded, a few KB each, until deleted (FUNCTION DELETE). A Redis ACL user
// needs +fcall and +function|load for the fast path, +evalsha and +eval for the fallback, +del
// for Reset. If a reply is lost after Redis
// ran the script, go-redis may retry it: an over-charge, never an over-admission. After a
// failover to a server whose clock is behind, buckets do not refill until its clock catches up.
package bucket
