// Package config owns the service's limits: the YAML file (strict: unknown keys are errors), its
// defaults, its validation (every problem reported at once with its key path), the limits that
// Envoy routes carry in context_extensions, the operator's own provider credentials (known by
// salted hash only: a key file is hashed at load and its content never kept), the providers the
// file declares by host (compiled into one provider.Hosts table that the pricer reads), and hot
// reload of the file.
//
// A compiled Config is immutable; the service swaps whole Configs atomically on reload. This
// package must never import the filter or the service wiring.
package config
