// Package server builds and runs the decision service: it loads the limits file, builds the
// pricer of each configuration (NewPolicy), connects the store, serves Authorization/Check
// (authzwire.Register with filter.CheckBytes), the ext_proc response path, gRPC health and
// reflection with the service's gRPC settings (GRPCOptions, whose codec is authzwire.Codec), and
// the admin endpoints: metrics, health, pprof and the admin API (admin.go: a scope's buckets
// peeked and reset through the breaker, the configuration in force; changes behind a bearer
// token).
// cmd/ext-authz parses flags into Options and calls New and Serve; cmd/loadgen starts the same
// service in process, and its no-op floor server uses the same GRPCOptions.
//
// It wires the other packages together and owns no decision logic; nothing but commands may
// import it.
package server
