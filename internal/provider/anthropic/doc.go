// Package anthropic is the room of Anthropic's API family: the Messages API, and the OpenAI SDK
// compatibility endpoint on api.anthropic.com (/v1/chat/completions), which is Anthropic for
// every rule but speaks OpenAI's dialect for its bodies and errors. It owns how the family's
// requests are recognised (its host, its API paths), how they are priced (Price: the Messages
// body, and the compatibility endpoint's chat body), how it answers an error (the body
// Anthropic's SDK parses, or OpenAI's for the compatibility endpoint), how its responses report
// usage (JSON bodies, the Messages stream's message_start and message_delta, and the
// compatibility endpoint's OpenAI usage) and which rate-limit headers it sends back.
//
// Dialect is its provider.Dialect, a stateless value safe for concurrent use; Price is a
// stateless function of one pricing.Request and the family's Settings (the estimate's
// multipliers and the cost of an image of unknown size: their defaults, sources and
// validation), and allocates nothing. It imports internal/provider, internal/provider/pricing,
// and internal/provider/openai for the compatibility endpoint's error body, headers, path and
// chat rule (with OpenAI's Settings); it must never import internal/provider/dialects,
// internal/filter, internal/reconcile or internal/tokens (they consume it).
//
// # Pricing
//
// The bodies priced: /v1/messages (system as a string or blocks, content blocks: text, image,
// tool_use, tool_result, thinking, documents; tools, max_tokens), and the OpenAI chat body of
// the compatibility endpoint, counted as Messages text (compatChat says how).
//
// Anthropic: no public tokenizer exists for Claude 3 and later (the one in older SDKs is
// Claude 2's, and Anthropic says it is not accurate for newer models). The estimate is
// ceil(factor * (cl100k_base tokens of all text, tool inputs and tool definitions as JSON, plus
// 10, plus 5 per message, 3 per block and 530 when tools are defined)), plus images. The factor
// is 1.6 for models on Anthropic's earlier tokenizer (claude-3*, claude-*-4-[0-6]*, i.e. up to
// Opus 4.6, Sonnet 4.6, Haiku 4.5) and 2.0 for newer and unknown models
// (Settings.Factors, Factor; DefaultFactors). Evidence, all public and none of it a
// tokenizer: comparisons of Anthropic's count_tokens with tiktoken put Claude 3.x/4.x at
// roughly 1.15-1.3x GPT-4o's o200k_base (English at the low end, code at the high end), and
// cl100k_base gives as many or more tokens than o200k_base on English and code and far more on
// CJK; Anthropic's migration guide says Opus 4.7's new tokenizer uses 1.0-1.35x the tokens of
// Opus 4.6, and independent count_tokens measurements (April 2026) found 1.45x on English
// prose, 1.15-1.33x on code and 1.0x on CJK, so 1.3 x 1.45 < 2.0. The multipliers are margins,
// not measurements: if count_tokens shows more, raise them. 530 is the largest tool-use system
// prompt in the table Anthropic publishes (Claude 3 Opus, tool_choice auto). Images:
// Anthropic's vision guide, width*height/750 after scaling to at most 1568 px and 1.15 MP;
// unknown sizes cost Settings.ImageTokens (DefaultImageTokens: 1600, the formula's maximum).
//
// Output reserved: max_tokens; when absent, the configured default
// (pricing.Request.DefaultOutput).
//
// Prompt caching: each cache_control breakpoint of a Messages body is recorded as a
// pricing.CachePoint (cache.go: the prefix's key, estimated tokens and lifetime), for
// internal/promptcache to tell whether the provider will read it. Recording one changes no
// count.
package anthropic
