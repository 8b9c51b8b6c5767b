// Package dialects is the one place that knows every room under internal/provider: it maps a
// provider to the dialect of its API family (Of, Named), recognises which provider and API a
// request calls from the rooms' hosts and paths, and from the hosts the limits file declares
// (Recognize, RecognizeIn), gathers the rooms' pricing settings
// (Settings: one field per room, validated together) and hands a parsed request to its room's
// pricing with that room's settings (Price). Adding a family is adding its package under
// internal/provider, its ID, and its lines here.
//
// It holds no state and allocates nothing on the request path; it is safe for concurrent use,
// and so is a validated Settings, which is read only. It imports internal/provider,
// internal/provider/pricing and the rooms, and must never import internal/filter,
// internal/reconcile or internal/tokens (they consume it).
package dialects
