// Package learn learns how far an estimated count is from the provider's own: for each provider,
// model and reason code of an approximate estimate, the distribution of the ratio of the input
// tokens the provider reported to the tokens the limiter estimated, decayed in time so that a
// changed tokenizer is relearned within a few half-lives, and the factor admission prices with
// (a high quantile of that ratio, clamped to a range around the static estimate, and only past a
// sample floor).
//
// Dist is the distribution (a fixed log-scale histogram of decayed weights) and Policy the rule
// that turns it into a factor; both are plain values with no I/O.
//
// Shared keeps the distributions of every replica in a Store (Memory, or Redis: one small hash
// per provider, model and reason, merged by learn.lua, hash-tagged by the provider like its
// buckets, bucket.HashTag): settlements add to a local delta (Observe) that a background loop
// (Run) writes in one pipeline per interval, and the same loop reads every known key back in a
// second pipeline, so that admission reads a local snapshot (Factor) and never waits for the
// store. A store failure empties the snapshot: static pricing until the store answers again.
//
// Key names hold the provider, the reason code and 128 bits of SHA-256 of the model: never a
// prompt, tenant or credential. It imports internal/bucket (for the hash tag) and go-redis, and
// must never import internal/filter, internal/reconcile or internal/config (they consume it).
//
// Proof: TestStoreConformance (Memory, redis-server, a 3-master Cluster), TestSharedOutage,
// TestSharedBounds, TestSharedRaise, the table tests of Dist and Policy and FuzzFactor.
package learn
