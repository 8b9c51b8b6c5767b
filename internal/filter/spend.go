package filter

import (
	"fmt"
	"math"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
	"github.com/llm-ratelimit/llm-ratelimit/internal/price"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/reservation"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tokens"
)

// spentResponse is the 429 of a spent money budget (a cost limit): nothing will change before
// the period renews, so the client is told not to retry rather than when to. The answer carries
// x-should-retry: false, which the official OpenAI and Anthropic SDKs obey before anything else
// (their _base_client's _should_retry: "If the server explicitly says whether or not to retry,
// obey"), and no retry-after; the body is the provider's own quota error (provider.QuotaExhausted:
// OpenAI's insufficient_quota, which OpenAI answers when an account's credit is spent, and which
// its SDKs raise as RateLimitError). The message names the budget, what is spent of it, what the
// request would reserve and when the budget renews, in the limit's time zone; for a rolling
// window, when enough of it has left the window for this request.
func spentResponse(est *tokens.Estimate, pl *plan, res *bucket.Result) *Answer {
	i := res.Blocking
	o, s := pl.owners[i], res.Buckets[i]
	if pl.bare {
		return deniedResponse(codes.ResourceExhausted, typev3.StatusCode_TooManyRequests, nil, nil,
			pl.metadata(est, decisionSpent, 0))
	}
	spent := min(s.Limit-s.Remaining, s.Limit)
	cost := pl.enforced.Buckets[i].Cost
	var when string
	if o.lim.Algorithm == bucket.SlidingWindow {
		when = "Enough of the budget for it frees up at " + pl.clock().Add(max(s.Wait, 0)).Truncate(time.Second).UTC().Format(time.RFC3339) + "."
	} else {
		renews := pl.clock().Add(max(s.Reset, 0)).Truncate(time.Second)
		if z := o.lim.Zone; z != nil {
			renews = renews.In(z)
		} else {
			renews = renews.UTC()
		}
		when = "The budget renews at " + renews.Format(time.RFC3339) + "."
	}
	period := periodName(o.lim)
	if o.lim.Algorithm == bucket.SlidingWindow {
		period = "in the last " + windowName(o.lim.Period)
	}
	msg := fmt.Sprintf("Budget %s is spent: %s of %s %s used %s; this request may cost up to %s %s. %s",
		o.rule.Name, price.FormatMoney(max(spent, 0)), price.FormatMoney(s.Limit), config.Currency, period,
		price.FormatMoney(cost), config.Currency, when)
	hdrs := pl.headers(est, res, 2)
	hdrs = append(hdrs, header("x-should-retry", "false"))
	hdrs = withErrorHeader(hdrs, est, provider.QuotaExhausted)
	body := errorBody(est, provider.Error{Class: provider.QuotaExhausted, Limit: provider.Cost.String(), Code: "insufficient_quota", Message: msg})
	return deniedResponse(codes.ResourceExhausted, typev3.StatusCode_TooManyRequests, hdrs, body,
		pl.metadata(est, decisionSpent, 0))
}

// unpricedResponse refuses a request under a cost limit whose model has no price: its cost
// cannot be known, and counting it as free would let it spend without bound. 403, not retried.
func unpricedResponse(est *tokens.Estimate, pl *plan) *Answer {
	body := errorBody(est, provider.Error{Class: provider.Forbidden, Code: string(reasonUnpriced),
		Message: fmt.Sprintf("The budget %s limits spend, and the rate limiter has no price for model %q: add it under prices.",
			pl.unpriced.Name, safeLabel(est.Model))})
	hdrs := withErrorHeader([]*corev3.HeaderValueOption{header("x-should-retry", "false")}, est, provider.Forbidden)
	return deniedResponse(codes.PermissionDenied, typev3.StatusCode_Forbidden, hdrs, body, pl.metadata(est, decisionUnpriced, 0))
}

// maxAlerts bounds the money budgets a replica remembers having reported in their period.
const maxAlerts = 4096

// spendAlerts remembers, per money budget (a cost bucket: a rule's scope) and period, that its
// threshold was reported, so that a replica reports it once per period and scope however the
// settlements move its spend around the threshold (a rolling window's period: its length from
// the report). Safe for concurrent use; touched only when a take crosses a threshold.
type spendAlerts struct {
	mu sync.Mutex
	// seen maps a bucket's name to the end of the period it was reported in (Unix seconds).
	seen map[string]int64
}

// first records that bucket name crossed its threshold in the period ending at end, and reports
// whether it is the first time in that period: none was reported in a period that has not ended.
func (a *spendAlerts) first(name string, end, now int64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.seen == nil {
		a.seen = map[string]int64{}
	}
	if e, ok := a.seen[name]; ok && e > now {
		return false
	}
	if len(a.seen) >= maxAlerts {
		for k, e := range a.seen {
			if e <= now {
				delete(a.seen, k)
			}
		}
		if len(a.seen) >= maxAlerts {
			clear(a.seen)
		}
	}
	a.seen[name] = end
	return true
}

// crossed counts and logs each money budget of an admitted request whose spend this take
// carried across its rule's alert_at part: the spend before the take was below the threshold
// and is at or above it after. The take is atomic, so across replicas one request crosses it;
// settlement may bring the spend back below and a later take cross it again, which a replica
// reports once per period (a rolling window: once per its length). The log names the rule and
// the tenant's hash, never the tenant.
func (f *Filter) crossed(pl *plan, now time.Time) {
	for i := range pl.owners {
		o := &pl.owners[i]
		if o.kind != reservation.KindCost || i >= len(pl.result.Buckets) || i >= len(pl.enforced.Buckets) || o.rule.AlertAt <= 0 {
			continue
		}
		s, cost := pl.result.Buckets[i], pl.enforced.Buckets[i].Cost
		threshold := int64(math.Ceil(o.rule.AlertAt * float64(s.Limit)))
		used := s.Limit - s.Remaining
		if used < threshold || used-cost >= threshold {
			continue
		}
		end := now.Add(max(s.Reset, 0)).Truncate(time.Second)
		if o.lim.Algorithm == bucket.SlidingWindow {
			end = now.Add(o.lim.Period).Truncate(time.Second)
		}
		if !f.alerts.first(pl.enforced.Buckets[i].Name, end.Unix(), now.Unix()) {
			continue
		}
		f.m.spendCrossed(o.rule.Name)
		f.log.Warn("spend threshold crossed", zap.String("rule", o.rule.Name), zap.String("tenant_hash", tenantHash(pl.tenant)),
			zap.Float64("alert_at", o.rule.AlertAt), zap.String("spent", price.FormatMoney(used)), zap.String("limit", price.FormatMoney(s.Limit)),
			zap.String("currency", config.Currency), zap.Time("period_end", end))
	}
}
