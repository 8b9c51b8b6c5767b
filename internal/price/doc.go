// Package price owns the price table: what a model's tokens cost in money, per provider and model
// glob, in integers of micro-units (millionths of the currency unit, micro-USD), never floats.
// It ships a default table (defaults.yaml, embedded: each price with the page it comes from and
// the date it was read) that a limits file overrides and extends, and computes the two amounts a
// cost limit needs: the most a request can cost (Max, reserved at admission) and what a reported
// usage costs (Cost, settled on the response path).
//
// A request's cost is Σ tokens x price per million tokens / 1,000,000, rounded up to the next
// micro-unit once per request, plus the price per request. Products are computed in 128 bits, so
// no count or price in range can overflow; results saturate at MaxAmount.
//
// internal/config reads the table (its own entries, then Defaults) and matches models to prices.
//
// It is a leaf: it must never import the filter, the store, the configuration or a provider room.
package price
