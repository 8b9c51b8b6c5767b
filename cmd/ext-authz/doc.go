// Command ext-authz is the llm-ratelimit decision service: an Envoy ext_authz gRPC server that
// prices each LLM request in tokens and debits shared budgets.
//
//	ext-authz [serve] [flags]          serve Check (gRPC) and the admin endpoints (HTTP)
//	ext-authz check-config FILE        validate a limits file; every problem at once
//	ext-authz estimate [flags] [FILE]  price a request body and show the rules and buckets it hits
//	ext-authz check [flags] [FILE]     send one Check to a running server and print the answer
//	ext-authz replay -config F FILE... replay decision logs against limits offline and report
//	ext-authz top -model M [flags]     watch a running service's buckets and decision rates on its admin ports
//
// Run `ext-authz COMMAND -h` for the flags of each.
//
// The command owns the process and nothing else: parsing flags (with environment variables as
// their defaults) into server.Options, building the one logger, and the operator tools above.
// main calls run(ctx, args, stdin, stdout, stderr) and is the only place that exits: 0 on
// success, 1 when check-config finds a problem, 2 on any other error (a usage error, a failed
// start-up); SIGTERM and
// SIGINT cancel ctx, which drains the server. Deciding, pricing and storing belong to
// internal/server and the packages it wires; this command must never hold that logic, and its
// non-test files must never import test infrastructure (internal/redistest, internal/faultproxy).
package main
