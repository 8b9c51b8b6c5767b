package reconcile

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
)

// report is what the provider's response headers say about its own budget.
type report struct {
	status int
	// budgets are what the headers report of each of the provider's budgets.
	budgets provider.Budgets
	// retryAfter is a 429's retry-after (or retry-after-ms).
	retryAfter time.Duration
	sse        bool
	// eventStream: the reply is an AWS event stream (application/vnd.amazon.eventstream).
	eventStream bool
	// encoding is the reply's Content-Encoding ("" when none).
	encoding string

	// local is true when Envoy made the response itself (AttrCodeDetails is not via_upstream).
	local bool
}

// readHeaders reads the status, content type and rate-limit headers of a response, the
// provider's budget through its dialect d.
func readHeaders(get func(string) (string, bool), d provider.Dialect) report {
	var r report
	if v, ok := get(":status"); ok {
		r.status, _ = strconv.Atoi(v)
	}
	if v, ok := get("content-type"); ok {
		ct := strings.ToLower(strings.TrimSpace(v))
		r.sse = strings.HasPrefix(ct, "text/event-stream")
		r.eventStream = strings.HasPrefix(ct, "application/vnd.amazon.eventstream")
	}
	if v, ok := get("content-encoding"); ok {
		r.encoding = v
	}
	r.budgets = d.Budgets(get)
	if r.status == 429 {
		// As the providers' SDKs read it (Stainless-generated _base_client.py): retry-after-ms
		// first (Azure OpenAI sends it), then retry-after in seconds.
		if ms, ok := provider.HeaderCount(get, "retry-after-ms"); ok && ms > 0 {
			r.retryAfter = time.Duration(ms) * time.Millisecond
		} else if v, ok := get("retry-after"); ok {
			if s, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && s > 0 && s < 86400 {
				r.retryAfter = time.Duration(s * float64(time.Second))
			}
		}
	}
	return r
}

// lowerTarget is the level a bucket of dimension d and limit ourLimit should hold when the
// provider reports what remains of its own limit in d: the provider's used share taken from our
// limit, so that a limits file set below the provider's limit keeps its margin. A rounded report
// is taken as rounded: the truth may be up to half the rounding above it, so only a level above
// that is lowered (rounding alone never drains a bucket). A tokens bucket reads the input budget
// when the provider reports no combined one (Anthropic's newer limits). ok is false when the
// report says nothing of d.
func lowerTarget(rep report, d provider.Dimension, ourLimit int64) (int64, bool) {
	b := rep.budgets[d]
	if !b.OK && d == provider.Tokens {
		b = rep.budgets[provider.InputTokens]
	}
	if !b.OK {
		return 0, false
	}
	target := b.Remaining + b.Rounding/2
	if b.Limit > ourLimit {
		target -= b.Limit - ourLimit
	}
	return target, true
}

// pauseTarget is the level from which a bucket refilling at limit per period can pay cost again
// exactly after wait: cost - wait x rate.
func pauseTarget(cost, limit int64, period, wait time.Duration) int64 {
	refill := math.Ceil(wait.Seconds() * float64(limit) / period.Seconds())
	return cost - int64(min(refill, 1e12))
}
