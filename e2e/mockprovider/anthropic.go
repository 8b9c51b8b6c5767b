package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Anthropic's own accounting, from https://docs.anthropic.com/en/api/rate-limits, with the
// mock's own counting and buckets (never the limiter's):
//
//   - requests (RPM), input tokens (ITPM) and output tokens (OTPM) are separate token buckets
//     per model ("the token bucket algorithm ... your capacity is continuously replenished up to
//     your maximum limit");
//   - ITPM counts input_tokens + cache_creation_input_tokens, and cache_read_input_tokens only
//     for the models the page marks (Claude Haiku 3 and 3.5): "For most Claude models, only
//     uncached input tokens count towards your ITPM rate limits";
//   - OTPM is "estimated based on max_tokens at the beginning of the request and adjusted at the
//     end of the request to reflect the actual output tokens used";
//   - the anthropic-ratelimit-{requests,input-tokens,output-tokens}-* headers report each
//     bucket, token counts "rounded to the nearest thousand", resets in RFC 3339.
//
// Prompt caching (https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching): a system
// prompt given as blocks, one of them marked "cache_control", caches the prefix up to the last
// marked block; the first request writes it (cache_creation_input_tokens), one with the same
// prefix within the TTL (5 minutes, refreshed on each read) reads it (cache_read_input_tokens);
// a prefix under the model's minimum (1024 tokens for most) is not cached. Breakpoints on tools
// and messages are not modelled: the e2e clients mark system prompts.
type Anthropic struct {
	RPM, ITPM, OTPM int64
	// CacheMin is the shortest cacheable prefix in tokens; CacheTTL a cache entry's life.
	CacheMin int64
	CacheTTL time.Duration
	Period   time.Duration
	// SpendCap, when positive, is the organisation's spend limit, in tokens admitted (input
	// counted by ITPM plus max_tokens): past it every request is refused with a 429 that carries
	// no retry-after, a spend limit being no rate limit (Anthropic's "This request would exceed
	// your account's monthly spend limit"; the rate-limits page sends retry-after with rate
	// limits only).
	SpendCap int64
	spent    int64

	mu     sync.Mutex
	meters map[string]*anthropicMeters // by model
	cache  map[string]time.Time        // prefix key: expiry
}

type anthropicMeters struct{ rpm, itpm, otpm *bucket }

// countsCacheReads is true for the models whose cache reads count toward ITPM.
func countsCacheReads(model string) bool {
	return strings.HasPrefix(model, "claude-3-haiku") || strings.HasPrefix(model, "claude-3-5-haiku")
}

// anthropicCharge is what one admission counted, dimension by dimension.
type anthropicCharge struct {
	Input, CacheWrite, CacheRead int64 // the usage's three input fields
	ITPM, OTPM                   int64 // what the buckets were charged at admission
}

// anthropicVerdict is the outcome of one admission.
type anthropicVerdict struct {
	Admitted, TooLarge bool
	Wait               time.Duration
	// Which names the refusing limit: requests, input_tokens or output_tokens.
	Which  string
	Charge anthropicCharge
	states map[string]meterState // by header family: requests, input-tokens, output-tokens
}

func (a *Anthropic) metersOf(model string, now time.Time) *anthropicMeters {
	if a.meters == nil {
		a.meters, a.cache = map[string]*anthropicMeters{}, map[string]time.Time{}
	}
	m := a.meters[model]
	if m == nil {
		m = &anthropicMeters{}
		if a.RPM > 0 {
			m.rpm = newBucket(a.RPM, a.Period, now)
		}
		if a.ITPM > 0 {
			m.itpm = newBucket(a.ITPM, a.Period, now)
		}
		if a.OTPM > 0 {
			m.otpm = newBucket(a.OTPM, a.Period, now)
		}
		a.meters[model] = m
	}
	return m
}

// Admit counts p (its prompt, its cache prefix, its max_tokens) against its model's buckets and
// debits them all when each can pay now; a cache write happens only for an admitted request.
func (a *Anthropic) Admit(p *Price, now time.Time) anthropicVerdict {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := a.metersOf(p.Model, now)
	var c anthropicCharge
	c.Input = p.Prompt
	hit := false
	if p.CacheKey != "" && p.CachePrefix >= a.CacheMin && p.CachePrefix <= p.Prompt {
		exp, ok := a.cache[p.CacheKey]
		hit = ok && now.Before(exp)
		if hit {
			c.CacheRead = p.CachePrefix
		} else {
			c.CacheWrite = p.CachePrefix
		}
		c.Input -= p.CachePrefix
	}
	c.ITPM = c.Input + c.CacheWrite
	if countsCacheReads(p.Model) {
		c.ITPM += c.CacheRead
	}
	c.OTPM = p.Output
	v := anthropicVerdict{Charge: c}
	if a.SpendCap > 0 && a.spent >= a.SpendCap {
		v.Which = "spend_cap"
		return v
	}
	for _, d := range []struct {
		name string
		b    *bucket
		cost int64
	}{{"requests", m.rpm, 1}, {"input_tokens", m.itpm, c.ITPM}, {"output_tokens", m.otpm, c.OTPM}} {
		if d.b == nil {
			continue
		}
		w, ok := d.b.wait(now, d.cost)
		if !ok {
			v.TooLarge, v.Which = true, d.name
			break
		}
		if w > v.Wait {
			v.Wait, v.Which = w, d.name
		}
	}
	if !v.TooLarge && v.Wait == 0 {
		v.Admitted, v.Which = true, ""
		a.spent += c.ITPM + c.OTPM
		for _, d := range []struct {
			b    *bucket
			cost int64
		}{{m.rpm, 1}, {m.itpm, c.ITPM}, {m.otpm, c.OTPM}} {
			if d.b != nil {
				d.b.debit(now, d.cost)
			}
		}
		if p.CacheKey != "" && (hit || c.CacheWrite > 0) {
			a.cache[p.CacheKey] = now.Add(a.CacheTTL)
		}
	}
	v.states = map[string]meterState{}
	for name, b := range map[string]*bucket{"requests": m.rpm, "input-tokens": m.itpm, "output-tokens": m.otpm} {
		if b != nil {
			v.states[name] = b.state(now)
		}
	}
	return v
}

// Settle adjusts the model's OTPM bucket from the max_tokens admission charged to the output
// actually generated.
func (a *Anthropic) Settle(model string, reserved, actual int64, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if m := a.metersOf(model, now); m.otpm != nil {
		m.otpm.debit(now, actual-reserved)
	}
}

// headers sets the anthropic-ratelimit-* headers of v.
func (v *anthropicVerdict) headers(h http.Header, now time.Time) {
	for name, s := range v.states {
		rem := max(s.Remaining, 0)
		if name != "requests" {
			rem = int64(math.Round(float64(rem)/1000) * 1000) // "rounded to the nearest thousand"
		}
		h.Set("anthropic-ratelimit-"+name+"-limit", strconv.FormatInt(s.Limit, 10))
		h.Set("anthropic-ratelimit-"+name+"-remaining", strconv.FormatInt(rem, 10))
		h.Set("anthropic-ratelimit-"+name+"-reset", now.Add(s.Reset).UTC().Format(time.RFC3339))
	}
}

// systemPrefix finds the cacheable prefix of a system prompt given as blocks: the texts up to
// the last block with cache_control, and a key naming that prefix for model.
func systemPrefix(model string, system json.RawMessage) (texts []string, key string) {
	var blocks []json.RawMessage
	if json.Unmarshal(system, &blocks) != nil {
		return nil, ""
	}
	last := -1
	var all []string
	for i, raw := range blocks {
		var b struct {
			Text         string          `json:"text"`
			CacheControl json.RawMessage `json:"cache_control"`
		}
		if json.Unmarshal(raw, &b) != nil {
			return nil, ""
		}
		all = append(all, b.Text)
		if len(b.CacheControl) > 0 && string(b.CacheControl) != "null" {
			last = i
		}
	}
	if last < 0 {
		return nil, ""
	}
	h := sha256.New()
	h.Write([]byte(model))
	for _, raw := range blocks[:last+1] {
		h.Write([]byte{0})
		h.Write(raw)
	}
	return all[:last+1], hex.EncodeToString(h.Sum(nil))
}
