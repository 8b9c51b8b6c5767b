// Package dialects is the one place that knows every room under internal/provider: it maps a
// provider to the dialect of its API family (Of, Named), recognises which provider and API a
// request calls from the rooms' hosts and paths (Recognize), and hands a parsed request to its
// room's pricing (Price). Adding a family is adding its package under internal/provider, its ID,
// and its lines here.
//
// It is safe for concurrent use, holds no state and allocates nothing. It imports
// internal/provider, internal/provider/pricing and the rooms, and must never import
// internal/filter, internal/reconcile or internal/tokens (they consume it).
package dialects
