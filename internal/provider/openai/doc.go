// Package openai is the room of OpenAI's API family: OpenAI itself, its Azure OpenAI dialect
// (the same bodies, errors and headers under /openai/deployments/{name}/...), and the
// OpenAI-compatible servers the limiter does not otherwise know. It owns how the family's
// requests are recognised (its hosts, its API paths, Azure's deployment path), how it answers an
// error (the body OpenAI's SDKs parse), how its responses report usage (JSON bodies and the
// server-sent events of chat completions, completions and the Responses API) and which
// rate-limit headers it sends back.
//
// Dialect is its provider.Dialect, a stateless value safe for concurrent use. It imports only
// internal/provider and must never import another room, internal/filter, internal/reconcile or
// internal/tokens (they consume it).
package openai
