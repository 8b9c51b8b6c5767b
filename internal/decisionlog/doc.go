// Package decisionlog records decisions and settlements as JSON lines, for operators and for
// the replay of real traffic against other limits (internal/replay, `ext-authz replay`).
//
// It owns the record types (Decision, Settlement), their one encoding (Append*, one flat JSON
// object per line) and its reading (Parse), and the writer (Log): a bounded buffered channel
// drained by one goroutine, so that recording never blocks the request path; a record that finds
// the buffer full is dropped and counted (llm_ratelimit_decision_log_dropped_total). The writer
// rotates its file by size and keeps a configured number of rotated files.
//
// A record holds what a decision was made on and what it decided, never what a request said: no
// prompt, no body, no header value but the tenant as the rules saw it, no credential. The tenant
// is the identifier tenant.source yields (a header, a principal, a claim); with tenant.source
// api_key it is already the salted hash "key:..." (config.KeyTenant), never the key. The path is
// kept without its query string, which may carry a key (Gemini's ?key=).
//
// Its callers (internal/filter, internal/reconcile) declare the small interfaces they record
// through. It imports only the standard library and Prometheus's client, and must never import
// internal/filter, internal/reconcile, internal/server or any wire protocol.
package decisionlog
