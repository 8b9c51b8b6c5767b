package bedrock

import (
	"encoding/json"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
)

// Usage reports, by operation:
//   - Converse: the body's "usage" {inputTokens, outputTokens, totalTokens,
//     cacheReadInputTokens, cacheWriteInputTokens} (API_runtime_TokenUsage.html), inputTokens
//     not counting the cache's reads and writes;
//   - ConverseStream: the same "usage" in the payload of the stream's last event, metadata
//     (API_runtime_ConverseStreamMetadataEvent.html);
//   - InvokeModel of a Claude model: Anthropic's Messages body, its "usage" {input_tokens,
//     output_tokens, cache_creation_input_tokens, cache_read_input_tokens};
//   - InvokeModelWithResponseStream: each chunk event's payload {"bytes": base64} holds one event
//     of the model's own stream (API_runtime_PayloadPart.html): Anthropic's message_start and
//     message_delta usage, and in the last one, message_stop, Bedrock's
//     "amazon-bedrock-invocationMetrics" {inputTokenCount, outputTokenCount,
//     cacheReadInputTokenCount, cacheWriteInputTokenCount, invocationLatency, firstByteLatency}.
//
// Each report's Input is the prompt with the cache's reads and writes, as provider.Usage counts
// it; no Total is reported (totalTokens leaves the output weight out).
type rawUsage struct {
	InputTokens  int64 `json:"inputTokens"`
	OutputTokens int64 `json:"outputTokens"`
	CacheRead    int64 `json:"cacheReadInputTokens"`
	CacheWrite   int64 `json:"cacheWriteInputTokens"`

	AnthropicInput      int64 `json:"input_tokens"`
	AnthropicOutput     int64 `json:"output_tokens"`
	AnthropicCacheWrite int64 `json:"cache_creation_input_tokens"`
	AnthropicCacheRead  int64 `json:"cache_read_input_tokens"`
}

type invocationMetrics struct {
	InputTokenCount           int64 `json:"inputTokenCount"`
	OutputTokenCount          int64 `json:"outputTokenCount"`
	CacheReadInputTokenCount  int64 `json:"cacheReadInputTokenCount"`
	CacheWriteInputTokenCount int64 `json:"cacheWriteInputTokenCount"`
}

type envelope struct {
	Usage   *rawUsage                  `json:"usage"`
	Message *struct{ Usage *rawUsage } `json:"message"`
	Metrics *invocationMetrics         `json:"amazon-bedrock-invocationMetrics"`
	// Bytes is a stream chunk's payload, base64 in JSON (encoding/json decodes it).
	Bytes []byte `json:"bytes"`
}

// Usage reads the usage one JSON document of the Bedrock runtime reports: a body, an event
// stream message's payload, or a chunk's decoded bytes.
func (Dialect) Usage(doc []byte) (provider.Usage, bool) { return usage(doc, true) }

func usage(doc []byte, chunk bool) (provider.Usage, bool) {
	var e envelope
	if json.Unmarshal(doc, &e) != nil {
		return provider.Usage{}, false
	}
	if e.Bytes != nil && chunk {
		return usage(e.Bytes, false) // a chunk holds one model event, never another chunk
	}
	if m := e.Metrics; m != nil {
		return provider.Usage{
			Input: provider.Count(m.InputTokenCount) + provider.Count(m.CacheReadInputTokenCount) +
				provider.Count(m.CacheWriteInputTokenCount),
			Output:     provider.Count(m.OutputTokenCount),
			CacheRead:  provider.Count(m.CacheReadInputTokenCount),
			CacheWrite: provider.Count(m.CacheWriteInputTokenCount),
		}, true
	}
	r := e.Usage
	if r == nil && e.Message != nil {
		r = e.Message.Usage
	}
	if r == nil {
		return provider.Usage{}, false
	}
	read := provider.Count(r.CacheRead) + provider.Count(r.AnthropicCacheRead)
	write := provider.Count(r.CacheWrite) + provider.Count(r.AnthropicCacheWrite)
	return provider.Usage{
		Input:     provider.Count(r.InputTokens) + provider.Count(r.AnthropicInput) + read + write,
		Output:    provider.Count(r.OutputTokens) + provider.Count(r.AnthropicOutput),
		CacheRead: read, CacheWrite: write,
	}, true
}
