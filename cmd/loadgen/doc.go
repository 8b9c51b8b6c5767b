// Command loadgen measures the decision service under load: it drives
// envoy.service.auth.v3.Authorization/Check over gRPC with realistic chat requests, at a fixed
// concurrency or arrival rate, and prints throughput and latency percentiles as a table and as
// JSON. In the same invocation it measures two floors at the same load, and prints the service's
// figures as ratios of them:
//
//   - noop: an ext_authz server with the service's gRPC settings that answers OK without reading
//     the request: the cost of gRPC itself on this machine;
//   - evalsha: a bare EVALSHA of a minimal one-bucket script against the same Redis: the cost of
//     one Redis round trip.
//
// By default it starts the service in process (internal/server, the code of cmd/ext-authz) on the
// Redis given by -redis-url, or on a redis-server it starts itself, or on the in-memory store
// (-store memory); -addr targets a running server instead. docs/performance.md has the method and
// the figures.
//
//	loadgen [-c 64] [-d 10s] [-body 1k] [-conversations N] [-tenants 100] [-deny 0.05] [-store redis|memory]
//	        [-redis-url URL] [-addr HOST:PORT] [-rate N] [-json FILE] [-cpuprofile FILE]
//
// It owns the workload (the generated requests, bench.yaml's limits) and the measurement: the
// floors, the slices that take turns, the Redis command and CPU counts (internal/redisstats) and
// the profiles. It reaches the service only through Check over gRPC, as Envoy does (the in-process
// service is internal/server, unchanged); it must never change how the service decides, and no
// package of the service may import it.
package main
