// Package tokens prices LLM requests in tokens: it reads a request's path, headers and body
// and returns the provider, API, model, prompt tokens, output tokens reserved and whether the
// count is exact. Text is counted by internal/tiktoken, the exact counter for OpenAI's
// cl100k_base and o200k_base encodings; this package decides which text, in which encoding, and
// what it costs. It imports internal/provider and internal/provider/dialects (the providers'
// names and hosts); it must never import internal/filter or internal/bucket (they consume it),
// and nothing in it touches the network (internal/tiktoken embeds the vocabularies).
//
// # APIs
//
// The host (Input.Host) decides the provider, the path the API (dialects.Recognize, from the
// hosts and paths of the rooms under internal/provider): api.openai.com is OpenAI,
// *.openai.azure.com and *.cognitiveservices.azure.com Azure, api.anthropic.com Anthropic; a
// path the host does not serve is UnknownAPI. Any other host is recognised from the path alone.
//
//   - OpenAI /v1/chat/completions: messages with string or content-part content, name,
//     assistant tool_calls and function_call, tool messages, tools/functions, response_format,
//     image parts.
//   - OpenAI /v1/completions: prompt as a string, array of strings, token array or array of
//     token arrays; suffix.
//   - OpenAI /v1/responses: instructions, input as a string or items, tools, text.format,
//     max_output_tokens.
//   - OpenAI /v1/embeddings: input as a string, array of strings or token arrays; no output.
//   - Azure OpenAI /openai/deployments/{name}/{chat/completions,completions,embeddings,
//     responses}?api-version=...: the model is the deployment's (Options.AzureDeployments, else
//     the deployment name itself), never the body's; /openai/v1/... with the model in the body.
//   - Anthropic /v1/chat/completions on api.anthropic.com (its OpenAI SDK compatibility
//     layer): the OpenAI chat body, priced with the Anthropic estimate; Anthropic for every
//     rule, answered in OpenAI's format (internal/provider/anthropic).
//   - Anthropic /v1/messages: system as a string or blocks, content blocks (text, image,
//     tool_use, tool_result, thinking, documents), tools, max_tokens.
//   - OpenAI-compatible servers (vLLM, LiteLLM, ...) on the same paths, also under a prefix
//     (any path ending in /chat/completions etc.); unknown models use Options.FallbackEncoding.
//
// Any other path is UnknownAPI: the raw body is counted as text and no output is reserved.
//
// # Counting rules and their sources
//
// Exact (Estimate.Exact): OpenAI chat messages whose content is a string, completions prompts
// and embeddings inputs, for models whose encoding is known (tiktoken.EncodingForModel:
// o200k_base for gpt-4o, gpt-4.1, gpt-4.5, gpt-5, o1/o3/o4 and gpt-oss; cl100k_base for gpt-4,
// gpt-3.5-turbo and text-embedding-3/ada-002; tiktoken's model table).
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
// Approximate (Estimate.Reason says why; the Reason constants document each price):
//
//   - Content parts: each text part counted on its own (no published rule for parts).
//   - Images: OpenAI's published rule from the vision guide ("Calculating costs"): detail low
//     is the base cost (85 for gpt-4o); otherwise the image is scaled to fit 2048x2048, then
//     its short side to 768, and costs base + tile per 512 px tile (85 + 170 for gpt-4o,
//     gpt-4.1, gpt-4.5; 2833 + 5667 for gpt-4o-mini; 75 + 150 for o1/o3; 70 + 140 for gpt-5),
//     or 32 px patches (at most 1536) times 1.62 (gpt-4.1-mini, gpt-5-mini), 2.46
//     (gpt-4.1-nano, gpt-5-nano), 1.72 (o4-mini). Sizes are read from data: URLs (PNG, GIF,
//     JPEG, WebP headers); an http(s) URL costs the rule's worst case (1445 for gpt-4o: 2x4
//     tiles) or Options.ImageTokens. "auto" detail is priced as high.
//   - Tools, functions, tool calls and JSON-schema response formats: no published rule;
//     their JSON text is counted plus 20 tokens for the hidden tools preamble (5 per tool
//     call). The JSON text is longer than OpenAI's TypeScript-like rendering, so this errs
//     high: 138-140 tokens where the cookbook's example costs 101-105.
//   - Responses API: the chat rule applied to instructions and input items; function calls,
//     outputs and reasoning items count as JSON text. A previous_response_id brings turns the
//     body does not show: reserved at the unseen-context bound (bound.go).
//   - Anthropic: no public tokenizer exists for Claude 3 and later (the one in older SDKs is
//     Claude 2's, and Anthropic says it is not accurate for newer models). The estimate is
//     ceil(factor * (cl100k_base tokens of all text, tool inputs and tool definitions as
//     JSON, plus 10, plus 5 per message, 3 per block and 530 when tools are defined)), plus
//     images. The factor
//     is 1.6 for models on Anthropic's earlier tokenizer (claude-3*, claude-*-4-[0-6]*, i.e.
//     up to Opus 4.6, Sonnet 4.6, Haiku 4.5) and 2.0 for newer and unknown models
//     (Options.AnthropicFactors, Options.AnthropicFactor). Evidence, all public and none of it
//     a tokenizer: comparisons of Anthropic's count_tokens with tiktoken put Claude 3.x/4.x at
//     roughly 1.15-1.3x GPT-4o's o200k_base (English at the low end, code at the high end),
//     and cl100k_base gives as many or more tokens than o200k_base on English and code and
//     far more on CJK; Anthropic's migration guide says Opus 4.7's new tokenizer uses 1.0-1.35x
//     the tokens of Opus 4.6, and independent count_tokens measurements (April 2026) found
//     1.45x on English prose, 1.15-1.33x on code and 1.0x on CJK, so 1.3 x 1.45 < 2.0. The
//     multipliers are margins, not measurements: if count_tokens shows more, raise them.
//     530 is the largest tool-use system prompt in the table Anthropic publishes (Claude 3
//     Opus, tool_choice auto). Images: Anthropic's vision guide, width*height/750 after scaling
//     to at most 1568 px and 1.15 MP; unknown sizes cost Options.AnthropicImageTokens (1600,
//     the formula's maximum).
//   - Unknown models: Options.FallbackEncoding (cl100k_base by default).
//
// Output reserved: max_completion_tokens or max_tokens (chat), max_tokens (completions,
// default 16 as the API's own), max_output_tokens (Responses), max_tokens (Anthropic), times n
// (chat) or max(n, best_of) per prompt (completions); when absent, the first
// Options.OutputRules glob matching the model, else Options.DefaultOutputTokens (4096).
// Embeddings reserve nothing.
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
// the top-level max_tokens found by a linear scan, else the model's maximum output
// (limits.go, with sources). A body with a bogus content-encoding that is plain JSON is priced
// as that. Input a request refers to but does not hold (previous_response_id, conversation,
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
// seeded hash of the text and the encoding (cache.go): a hit costs a hash of the text instead
// of its tokenization. Only texts clients resend are offered to it (system prompts and
// instructions, tools and response formats, every message or input item but the last); the
// last message, new on almost every request, is always counted. Estimates are identical with
// and without it (FuzzEstimate checks both). BenchmarkConversation measures it on 8 KB bodies
// of ongoing conversations.
//
// Proof: the cookbook fixtures (testdata/openai_cookbook.json), FuzzEstimate and FuzzBound.
// Benchmarks: BenchmarkEstimate, BenchmarkParse, BenchmarkConversation. Long fuzzing:
//
//	go test -run '^$' -fuzz FuzzEstimate -fuzztime 10m ./internal/tokens/
package tokens
