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
// It must never import internal/filter, internal/reconcile or
// internal/config (they consume it).
package learn
