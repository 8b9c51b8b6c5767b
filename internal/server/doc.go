// Package server builds and runs the decision service: it loads the limits file, builds the
// pricer of each configuration (NewPolicy), connects the store, serves Authorization/Check, gRPC
// health and reflection with the service's gRPC settings (GRPCOptions, whose codec hands Check the
// request's encoding for filter.CheckBytes and encodes answers with filter.AppendAnswer), and
// the admin endpoints.
// cmd/ext-authz parses flags into Options and calls New and Serve; cmd/loadgen starts the same
// service in process, and its no-op floor server uses the same GRPCOptions.
//
// It wires the other packages together and owns no decision logic; nothing but commands may
// import it.
package server
