// Package replay runs recorded traffic (internal/decisionlog's lines) against a limits file
// offline, to see what other limits would have done: every recorded decision goes through the
// real decision code (internal/filter with the in-memory store of internal/bucket, unchanged)
// at its recorded time on a virtual clock, and every recorded settlement through
// internal/reconcile's settlement, so that the budgets evolve as they would have.
// A request the live limits refused and the replayed ones admit has no recorded settlement; it
// is settled as the recorded ones of its provider and model were on average (usage as fractions
// of what was priced, after their mean latency), counted apart, so that a what-if with wider
// limits does not keep such reservations for ever.
//
// Pricing is not run again: the log carries the priced dimensions of each request (prompt,
// output reserved, whether exact and why not), and an Estimator returns them. The tenant and
// the priority class are given to the filter as they were recorded, whatever tenant.source the
// limits file names. Route context_extensions, JWT-claim plans and provider feedback are not in
// the log and are not replayed.
//
// The result is a Report: per rule, tenant and model, what was allowed, held (with the holds'
// median and 99th percentile) and denied, the first refusal, and optionally the 429s a
// provider's own limits (ProviderLimits, counting as the provider's accounting profile says, at
// admission and at settlement) would have sent for the traffic the limits let through;
// it renders as a table, JSON or an SVG chart. The same inputs give the same report: the
// clock, the jitter and the lease ids are the replay's own, and events are taken in time order
// (recorded order breaking ties).
//
// It imports internal/filter, internal/bucket, internal/config, internal/reconcile,
// internal/reservation, internal/decisionlog, internal/tokens and internal/provider (with its
// dialects), and must never import internal/server or any network code: it is offline by
// construction.
package replay
