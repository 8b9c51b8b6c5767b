// Package anthropic is the room of Anthropic's API family: the Messages API, and the OpenAI SDK
// compatibility endpoint on api.anthropic.com (/v1/chat/completions), which is Anthropic for
// every rule but speaks OpenAI's dialect for its bodies and errors. It owns how the family's
// requests are recognised (its host, its API paths), how it answers an error (the body
// Anthropic's SDK parses, or OpenAI's for the compatibility endpoint), how its responses report
// usage (JSON bodies, the Messages stream's message_start and message_delta, and the
// compatibility endpoint's OpenAI usage) and which rate-limit headers it sends back.
//
// Dialect is its provider.Dialect, a stateless value safe for concurrent use. It imports
// internal/provider, and internal/provider/openai for the compatibility endpoint's error body,
// headers and path; it must never import internal/filter, internal/reconcile or internal/tokens
// (they consume it).
package anthropic
