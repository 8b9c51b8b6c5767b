// Package promptcache remembers which prompt-cache prefixes a provider holds, as far as this
// replica can tell: the prefixes (pricing.CachePoint, recorded by a provider's room from the
// request's cache markers) that admitted requests sent, when they first went and when they last
// did. Admission asks it for the longest prefix of a request the provider should read from its
// cache (Memory.Expect), and tells it what went out (Memory.Sent).
//
// Contract: an expectation is only a price. A request whose expected read turns out to be a
// write is charged the difference when it settles (internal/reconcile), so a wrong guess costs
// one request's prefix for one round trip, never a lasting drift. The memory is per replica and
// bounded (Options.Entries); a prefix it cannot hold is expected to be written, the safe side.
// Keys are process-seeded hashes: nothing of a prompt is kept, logged or sent.
//
// It imports only provider/pricing (the Estimate it reads and sets).
package promptcache
