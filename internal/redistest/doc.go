// Package redistest starts real, throw-away Redis processes for tests: a single redis-server
// (optionally with a password, an ACL user or TLS), a Redis Sentinel watching one, and a Redis
// Cluster created with redis-cli --cluster create.
//
// Every process listens on a free loopback port, keeps its files in a t.TempDir, persists nothing
// (--save "" --appendonly no) and is killed by t.Cleanup; on Linux it is also killed by the kernel
// if the test binary dies first (Pdeathsig). Tests therefore never share state with each other or
// with a Redis already running on the machine, and may run in parallel.
//
// A missing redis-server or redis-cli is a test failure ("redis-server not found: run make deps"),
// never a skip: the suite must not pass by testing nothing.
//
// Server.URL, Sentinel.URL and Cluster.URL return URLs in the form bucket.NewClient accepts
// (redis://, rediss://, redis+sentinel://, redis+cluster://).
//
// redistest is test infrastructure: only _test.go files may import it, and it must never import
// the project's own packages.
package redistest
