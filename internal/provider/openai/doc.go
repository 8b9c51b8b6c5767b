// Package openai is the room of OpenAI's API family: OpenAI itself, its Azure OpenAI dialect
// (the same bodies, errors and headers under /openai/deployments/{name}/...), and the
// OpenAI-compatible servers the limiter does not otherwise know. It owns how the family's
// requests are recognised (its hosts, its API paths, Azure's deployment path and the model a
// deployment serves), how they are priced (Price: the walk of each API's body, with its
// Settings), how it answers an error (the body OpenAI's SDKs parse), how its responses report
// usage (JSON bodies and the server-sent events of chat completions, completions and the
// Responses API) and which rate-limit headers it sends back.
//
// Dialect is its provider.Dialect, a stateless value safe for concurrent use; Price and Chat
// are stateless functions of one pricing.Request and the family's Settings (the Azure
// deployments' models, the cost of an image of unknown size: their defaults and validation),
// and allocate nothing. It imports internal/provider and internal/provider/pricing, and must
// never import another room, internal/provider/dialects, internal/filter, internal/reconcile or
// internal/tokens (they consume it).
//
// # Pricing
//
// The bodies priced (tokens.Pricer recognises the API, chooses the encoding and parses the body;
// internal/provider/dialects calls Price):
//
//   - /v1/chat/completions: messages with string or content-part content, name, assistant
//     tool_calls and function_call, tool messages, tools/functions, response_format, image
//     parts.
//   - /v1/completions: prompt as a string, array of strings, token array or array of token
//     arrays; suffix.
//   - /v1/responses: instructions, input as a string or items, tools, text.format,
//     max_output_tokens.
//   - /v1/embeddings: input as a string, array of strings or token arrays; no output.
//
// Exact (no Reason): chat messages whose content is a string, completions prompts and
// embeddings inputs, for models whose encoding is known.
//
//   - Chat: OpenAI Cookbook, "How to count tokens with tiktoken" (num_tokens_from_messages):
//     3 tokens per message plus the tokens of each of its string values (role, content, name,
//     tool_call_id, ...), +1 per name, +3 priming the reply (gpt-3.5-turbo-0301: 4 and -1).
//     testdata/openai_cookbook.json holds the cookbook's published totals (129 for gpt-4 and
//     gpt-3.5-turbo, 124 for gpt-4o, 127 for gpt-3.5-turbo-0301) and the tests match them.
//   - Completions and embeddings: the prompt's tokens; token-id arrays count one per id.
//   - Special-token strings in user text ("<|endoftext|>") are ordinary text, as OpenAI's API
//     treats them (tiktoken's encode_ordinary).
//
// Approximate (the Reason says why; the pricing.Reason constants document each price):
//
//   - Content parts: each text part counted on its own (no published rule for parts).
//   - Images: OpenAI's published rule from the vision guide ("Calculating costs"): detail low
//     is the base cost (85 for gpt-4o); otherwise the image is scaled to fit 2048x2048, then
//     its short side to 768, and costs base + tile per 512 px tile (85 + 170 for gpt-4o,
//     gpt-4.1, gpt-4.5; 2833 + 5667 for gpt-4o-mini; 75 + 150 for o1/o3; 70 + 140 for gpt-5),
//     or 32 px patches (at most 1536) times 1.62 (gpt-4.1-mini, gpt-5-mini), 2.46
//     (gpt-4.1-nano, gpt-5-nano), 1.72 (o4-mini). Sizes are read from data: URLs (PNG, GIF,
//     JPEG, WebP headers); an http(s) URL costs the rule's worst case (1445 for gpt-4o: 2x4
//     tiles) or Settings.ImageTokens. "auto" detail is priced as high.
//   - Tools, functions, tool calls and JSON-schema response formats: no published rule;
//     their JSON text is counted plus 20 tokens for the hidden tools preamble (5 per tool
//     call). The JSON text is longer than OpenAI's TypeScript-like rendering, so this errs
//     high: 138-140 tokens where the cookbook's example costs 101-105.
//   - Responses API: the chat rule applied to instructions and input items; function calls,
//     outputs and reasoning items count as JSON text. A previous_response_id brings turns the
//     body does not show: reserved at the unseen-context bound (internal/tokens/bound.go).
//
// Output reserved: max_completion_tokens or max_tokens (chat), max_tokens (completions,
// default 16 as the API's own), max_output_tokens (Responses), times n (chat) or max(n,
// best_of) per prompt (completions); when absent, the configured default
// (pricing.Request.DefaultOutput). Embeddings reserve nothing.
package openai
