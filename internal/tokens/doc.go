// Package tokens prices LLM requests in tokens: it reads a request's path, headers and body
// and returns the provider, API, model, prompt tokens, output tokens reserved and whether the
// count is exact. It is the entry point (Pricer, Options, Input; Estimate and Reason are
// internal/provider/pricing's): it recognises the request (internal/provider/dialects.Recognize),
// reads its body as the provider would (charsets, gzip and deflate, partial and oversized
// bodies), parses it into a pricing.Request and hands that to the provider's room
// (dialects.Price), which chooses the encoding and walks the body by its API's rules.
// What a body that cannot be read in full costs (bound.go), the input a request refers to but
// does not hold and the raw pricing of unknown APIs are this package's; the settings of one
// provider family are its room's (Options.OpenAI, Options.Anthropic), which New validates and
// Estimate hands to the room through dialects.Price. Text is counted by internal/tiktoken, the
// exact counter for OpenAI's cl100k_base and o200k_base encodings.
//
// It imports internal/provider, internal/provider/dialects, internal/provider/pricing, the rooms
// (for their Settings) and internal/tiktoken; it must never import internal/filter or
// internal/bucket (they consume it), and nothing in it touches the network (internal/tiktoken
// embeds the vocabularies).
//
// # APIs
//
// The host (Input.Host) decides the provider, the path the API (dialects.Recognize, from the
// hosts and paths of the rooms under internal/provider): api.openai.com is OpenAI,
// *.openai.azure.com and *.cognitiveservices.azure.com Azure, api.anthropic.com Anthropic; a
// path the host does not serve is UnknownAPI. Any other host is recognised from the path alone.
// Each API's rules, with their sources, are in its room's package doc:
//
//   - internal/provider/openai: /v1/chat/completions, /v1/completions, /v1/responses and
//     /v1/embeddings of OpenAI, Azure OpenAI and OpenAI-compatible servers (vLLM, LiteLLM, ...;
//     also under a prefix: any path ending in /chat/completions etc.).
//   - internal/provider/anthropic: /v1/messages, and /v1/chat/completions on api.anthropic.com
//     (its OpenAI SDK compatibility layer): the OpenAI chat body, priced with the Anthropic
//     estimate; Anthropic for every rule, answered in OpenAI's format.
//   - Azure OpenAI /openai/deployments/{name}/{chat/completions,completions,embeddings,
//     responses}?api-version=...: the model is the deployment's (openai.Settings.DeploymentModel:
//     Options.OpenAI.AzureDeployments, else the deployment name itself), never the body's;
//     /openai/v1/... with the model in the body.
//
// Any other path is UnknownAPI: the raw body is counted as text and no output is reserved.
//
// A host the limits file declares (Options.Providers, dialects.RecognizeIn) is its declared
// provider's (Estimate.Name): priced by the room of its dialect as on that family's own host, its
// texts counted in its declared encoding (every model alike), or in cl100k_base times its
// estimate's ratio (ReasonDeclaredEstimate); any other path of the host is its Unpriced API.
//
// # Encodings
//
// The rooms choose from the encodings a Pricer loads (pricing.Config.Encoding): OpenAI models
// are counted in their encoding (tiktoken.EncodingForModel: o200k_base for gpt-4o, gpt-4.1,
// gpt-4.5, gpt-5, o1/o3/o4 and gpt-oss; cl100k_base for gpt-4, gpt-3.5-turbo and
// text-embedding-3/ada-002; tiktoken's model table), unknown models in Options.FallbackEncoding
// (cl100k_base by default, approximate); Anthropic's in cl100k_base (its room says why). The
// raw body of an unknown API is counted in the encoding of the model it names, if any.
//
// Output reserved, when the request names no maximum: the first Options.OutputRules glob
// matching the model, else Options.DefaultOutputTokens (4096). Embeddings reserve nothing.
//
// Bound is Estimate without the counting: every text costs its length in bytes (no token of
// either encoding is shorter than a byte), the rest of the price computed alike, so it is never
// below Estimate and costs a parse; ReasonDeadline marks it. The filter answers with it when an
// exact count would not fit the check's time.
//
// Bodies are read as the providers' Python services read them (json.loads): a UTF-8 BOM,
// UTF-16 and UTF-32 (charset.go), NaN and Infinity, nesting up to 10,000 levels. A body that
// still cannot be read in full is never an error and never priced at the default: non-JSON,
// partial bodies (shorter than content-length, marked partial by Envoy, or of
// Options.RequestBufferBytes without content-length), bodies over MaxBodyBytes, gzip/deflate
// that does not decode within MaxDecodedBytes and other encodings are priced at an upper bound
// (bound.go): one token per byte of the declared size, at most the model's context window, and
// the top-level max_tokens found by a linear scan, else the model's maximum output (the
// rooms' tables with their sources, limits.go of internal/provider/openai and anthropic). A
// body with a bogus content-encoding that is plain JSON is priced as that. Input a request refers to but does not hold (previous_response_id, conversation,
// stored prompts, files, document URLs, MCP servers) raises the prompt to the model's context
// window or by Options.UnseenContextTokens. Invalid UTF-8 and wrong types are priced field by
// field and marked approximate. A run of over 256 KiB in which no token boundary can be proven
// (one character repeated) is counted in 256 KiB chunks (tiktoken's CountBounded,
// ReasonLongRun), which bounds the merge scratch of one Estimate to about 10 MiB.
//
// # Counting
//
// Every text is counted by a tiktoken.Encoding, whose Count equals
// len(tiktoken.encode_ordinary(text)) for tiktoken 0.14.0 in time linear in the text
// (internal/tiktoken/doc.go says how, and how that is proven).
//
// Chat clients resend the whole conversation on every turn, and the same system prompt and
// tools on every request. A Pricer keeps a fixed table (Options.CountCache, 65,536 entries,
// 512 KiB) of the counts of those resent texts of 256 bytes or more, keyed by a per-process
// seeded hash of the text and the encoding (pricing.Cache): a hit costs a hash of the text
// instead of its tokenization. Only texts clients resend are offered to it (the rooms mark
// system prompts and instructions, tools and response formats, every message or input item but
// the last); the last message, new on almost every request, is always counted. Estimates are
// identical with and without it (FuzzEstimate checks both). BenchmarkConversation measures it
// on 8 KB bodies of ongoing conversations.
//
// Proof: the table tests of what this package does around the rooms (TestEstimate: recognition,
// the model and stream read from the body, options, reading and decoding bodies, bounds), the
// rooms' table tests of every API's rules (TestPrice in internal/provider/openai and
// internal/provider/anthropic) and their fixtures (the OpenAI cookbook's published totals in
// internal/provider/openai/testdata), FuzzEstimate and FuzzBound. Benchmarks: BenchmarkEstimate, BenchmarkParse, BenchmarkConversation. Long fuzzing:
//
//	go test -run '^$' -fuzz FuzzEstimate -fuzztime 10m ./internal/tokens/
package tokens
