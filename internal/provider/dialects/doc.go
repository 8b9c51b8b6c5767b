// Package dialects is the one place that maps a provider to the room of its API family. Adding
// a family is adding its package under internal/provider, its ID, and its line in Of.
//
// It is safe for concurrent use and holds no state. It imports internal/provider and the rooms,
// and must never import internal/filter, internal/reconcile or internal/tokens.
package dialects
