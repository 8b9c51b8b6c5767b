// Package bedrock is the room of the Amazon Bedrock runtime: the Converse, ConverseStream,
// InvokeModel and InvokeModelWithResponseStream operations on bedrock-runtime.{region}.
// amazonaws.com (FIPS endpoints included). It owns how their requests are recognised (the host,
// the /model/{modelId}/... paths, the model id in the path), how they are priced (Price: the
// Converse body, and InvokeModel's native bodies, Claude's by the anthropic room's rules), how
// Bedrock counts them against its tokens-per-minute quota (Dialect.Profile: the 5x output
// burndown of the Claude 4-era models, the reservation of the cache's reads at the start and
// their release at the end), how it answers an error (429 with x-amzn-ErrorType:
// ThrottlingException and {"message"}, which boto3 and the AWS SDKs retry as throttling) and
// how its responses report usage (Converse's usage, ConverseStream's metadata event, the
// Anthropic usage and amazon-bedrock-invocationMetrics inside InvokeModelWithResponseStream's
// chunks). The streams' binary framing, application/vnd.amazon.eventstream, is read by
// internal/reconcile, which hands each message's payload to Dialect.Usage.
//
// Requests are signed with SigV4 over the host, the path and the body: the limiter only reads
// them, and the proxy must forward the Host the client signed (Envoy does: it routes on
// :authority and keeps it).
//
// Dialect is its provider.Dialect, a stateless value safe for concurrent use; Price is a
// stateless function of one pricing.Request and allocates nothing. It imports
// internal/provider, internal/provider/pricing and internal/provider/anthropic (Claude's
// estimate, limits and image rule); it must never import internal/provider/dialects,
// internal/filter, internal/reconcile or internal/tokens (they consume it).
//
// # Pricing
//
// Bedrock turns a Converse request into the model's own. For a Claude model (any id naming
// anthropic.claude-..., cross-Region profiles and ARNs included) that is a Messages request,
// estimated as the anthropic room estimates one (cl100k_base text times the model's factor, its
// overheads per message and block, its tool-use system prompt, its image rule): the estimate
// carries the reason anthropic_estimate. Another vendor's model is counted in the fallback
// encoding (unknown_model). InvokeModel bodies of Claude are Messages bodies, priced by the
// anthropic room; other vendors' are counted as their JSON text (unpriced_part).
//
// Output reserved: inferenceConfig.maxTokens (Converse), max_tokens (Claude's InvokeModel body,
// or each vendor's field); when unset, the model's maximum output, which Bedrock reserves (the
// table's figure; the configured default for a model it does not know).
//
// Prompt caching: Bedrock reserves cache reads with the prompt at the start, so no breakpoint
// is recorded and admission counts the whole prompt; settlement gives the reads back.
package bedrock
