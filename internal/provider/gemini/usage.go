package gemini

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/anthropic"
)

// rawUsage is a GenerateContentResponse's usageMetadata (ai.google.dev/api/generate-content#
// UsageMetadata): promptTokenCount is the input, cached content included
// (cachedContentTokenCount is part of it); candidatesTokenCount the answer and
// thoughtsTokenCount the thinking, both output; toolUsePromptTokenCount the input of tool
// results Google ran itself (code execution, search), which is input too; totalTokenCount their
// sum.
type rawUsage struct {
	Prompt     int64 `json:"promptTokenCount"`
	Candidates int64 `json:"candidatesTokenCount"`
	Cached     int64 `json:"cachedContentTokenCount"`
	Thoughts   int64 `json:"thoughtsTokenCount"`
	ToolUse    int64 `json:"toolUsePromptTokenCount"`
	Total      int64 `json:"totalTokenCount"`
}

type envelope struct {
	UsageMetadata *rawUsage `json:"usageMetadata"`
}

// Usage reads the usage one JSON document reports: a generateContent body, one element of a
// streamed array or the data of one server-sent event (each chunk carries the usage so far,
// so the last one wins), or (Claude on Vertex) an Anthropic Messages body or event.
func (Dialect) Usage(doc []byte) (provider.Usage, bool) {
	var e envelope
	if json.Unmarshal(doc, &e) != nil {
		return provider.Usage{}, false
	}
	r := e.UsageMetadata
	if r == nil {
		return anthropic.Dialect{}.Usage(doc)
	}
	return provider.Usage{
		Input:     provider.Count(r.Prompt) + provider.Count(r.ToolUse),
		Output:    provider.Count(r.Candidates) + provider.Count(r.Thoughts),
		CacheRead: min(provider.Count(r.Cached), provider.Count(r.Prompt)),
		Total:     provider.Count(r.Total),
	}, true
}

// MaxRetryDelay bounds the wait a provider 429 may set: a day, as Gemini's daily quotas reset
// within one.
const MaxRetryDelay = 24 * time.Hour

// CapacityBackoff is the shared pause after a Vertex AI 429 that says nothing of when to retry:
// under dynamic shared quota a 429 means the shared pool is busy, not that a project limit was
// reached ("There are no per-project quotas ... a 429 error indicates the shared resource pool
// is busy", cloud.google.com/vertex-ai/generative-ai/docs/dynamic-shared-quota), and Google's
// advice is to retry with exponential backoff starting at about a second
// (cloud.google.com/vertex-ai/generative-ai/docs/error-code-429). It pauses the buckets marked
// provider_feedback for that long, for every replica, and learns no limit.
const CapacityBackoff = time.Second

type errorEnvelope struct {
	Error struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Details []struct {
			Type       string `json:"@type"`
			RetryDelay string `json:"retryDelay"`
		} `json:"details"`
	} `json:"error"`
}

// RetryAfter reads how long a provider 429 body of provider id asks to wait: the
// google.rpc.RetryInfo detail's retryDelay ("12s"), else the message's "Please retry in
// 10.673410956s." (both in the Gemini API's 429, google-gemini/gemini-cli#8437,
// continuedev/continue#9745); on Vertex AI, CapacityBackoff when the body says neither. ok is
// false when the body gives no wait and no rule supplies one (a Gemini 429 for a spending
// limit). The wait is at most MaxRetryDelay.
func (Dialect) RetryAfter(id provider.ID, body []byte) (time.Duration, bool) {
	var e errorEnvelope
	if json.Unmarshal(body, &e) == nil {
		for _, d := range e.Error.Details {
			if strings.HasSuffix(d.Type, "google.rpc.RetryInfo") {
				if w, ok := ParseDuration(d.RetryDelay); ok {
					return w, true
				}
			}
		}
		if w, ok := retryIn(e.Error.Message); ok {
			return w, true
		}
	}
	if id == provider.Vertex {
		return CapacityBackoff, true
	}
	return 0, false
}

// ParseDuration reads google.protobuf.Duration's JSON form ("12s", "0.5s", "10.673410956s"):
// ok is false for anything else, a negative or zero wait; the wait is at most MaxRetryDelay.
func ParseDuration(s string) (time.Duration, bool) {
	num, ok := strings.CutSuffix(strings.TrimSpace(s), "s")
	if !ok || num == "" || num[0] == '+' || num[0] == '-' {
		return 0, false
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || !(f > 0) {
		return 0, false
	}
	if f >= MaxRetryDelay.Seconds() {
		return MaxRetryDelay, true
	}
	return time.Duration(f * float64(time.Second)), true
}

// retryIn finds "retry in {duration}" in a message.
func retryIn(msg string) (time.Duration, bool) {
	const key = "retry in "
	i := strings.Index(strings.ToLower(msg), key)
	if i < 0 {
		return 0, false
	}
	rest := msg[i+len(key):]
	j := 0
	for j < len(rest) && (rest[j] >= '0' && rest[j] <= '9' || rest[j] == '.') {
		j++
	}
	if j == 0 || j >= len(rest) || rest[j] != 's' {
		return 0, false
	}
	return ParseDuration(rest[:j+1])
}
