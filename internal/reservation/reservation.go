package reservation

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/price"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
)

// MetadataNamespace is where Envoy files the dynamic metadata of an ext_authz answer, which it
// forwards to the ext_proc service (metadata_options.forwarding_namespaces).
const MetadataNamespace = "envoy.filters.http.ext_authz"

// MetadataKey is the field of the ext_authz dynamic metadata that holds the encoded reservation.
const MetadataKey = "reservation"

// MetadataIDKey is the field of the ext_authz dynamic metadata that names the reservation for the
// decision log (internal/decisionlog): present only while the log is on, so that the response
// path's settlement record is tied to its decision.
const MetadataIDKey = "reservation_id"

// MetadataExactKey is the field of the ext_authz dynamic metadata that says whether the
// request's prompt was counted exactly (true) or estimated (false), for the response path's
// estimate-error metric.
const MetadataExactKey = "exact"

// MetadataReasonKey is the field of the ext_authz dynamic metadata that names why the prompt
// was estimated (pricing.Reason), and MetadataStaticKey the one holding the prompt's static
// estimate when the limiter learns its error (internal/learn): the response path records the
// provider's count against it.
const (
	MetadataReasonKey = "estimate_reason"
	MetadataStaticKey = "static_prompt_tokens"
)

// MetadataLearnOutputKey is the field of the ext_authz dynamic metadata that is true when a rule
// of the request reserves the learned output (reserve_output: learned): the response path
// records the completion's tokens for the model.
const MetadataLearnOutputKey = "learn_output"

// Bucket kinds: what a reserved bucket counts. The check path names its buckets with the same
// letters.
const (
	KindTokens      = 't' // input plus weighted output
	KindInput       = 'i' // input tokens
	KindOutput      = 'o' // weighted output tokens
	KindRequests    = 'r'
	KindConcurrency = 'c'
	// KindCost counts money, in micro-units (a cost limit): reserved at the most the request
	// can cost, settled to what its usage costs at Reservation.Price.
	KindCost = '$'
)

// KindOf is the kind of a bucket of dimension d.
func KindOf(d provider.Dimension) byte {
	switch d {
	case provider.InputTokens:
		return KindInput
	case provider.OutputTokens:
		return KindOutput
	case provider.Requests:
		return KindRequests
	case provider.Cost:
		return KindCost
	}
	return KindTokens
}

// Dimension is the dimension a bucket of kind k counts; ok is false for KindConcurrency.
func Dimension(k byte) (d provider.Dimension, ok bool) {
	switch k {
	case KindTokens:
		return provider.Tokens, true
	case KindInput:
		return provider.InputTokens, true
	case KindOutput:
		return provider.OutputTokens, true
	case KindRequests:
		return provider.Requests, true
	case KindCost:
		return provider.Cost, true
	}
	return 0, false
}

// Tokenish is true for the kinds that count tokens (and settle to a response's usage).
func Tokenish(k byte) bool { return k == KindTokens || k == KindInput || k == KindOutput }

// Bucket is one bucket a request was charged: its kind, whether the provider's reports may lower
// it, and its Spec, whose Cost is what the request paid.
type Bucket struct {
	Kind     byte
	Feedback bool
	// Refund is true when the unused part of the reservation may be given back.
	Refund bool
	Spec   bucket.Spec
}

// Reservation is what one admitted request holds.
type Reservation struct {
	// Tag is the buckets' bucket.Request.Tag (the provider).
	Tag string
	// Lease is the in-flight lease of the Concurrency buckets ("" when none).
	Lease string
	// Model is the model the request named, for metrics.
	Model string
	// Prompt and Output are the estimate: prompt tokens and reserved output tokens (before
	// the output weight).
	Prompt, Output int64
	// Weight is the accounting profile's output weight (0 or 1: unweighted), CacheReadsFree
	// whether its input dimensions give cache reads back: what settlement needs of the profile
	// the request was counted with.
	Weight         int64
	CacheReadsFree bool
	// CharsCounted: the tokens dimension was counted by the provider's character rule
	// (provider.MaxOfChars), which admission applied exactly: no usage makes it an overage.
	CharsCounted bool
	// Price is the model's price at admission, which settles its cost buckets (nil when it
	// has none): a reload of the price table between a request and its response changes
	// nothing of what it is charged.
	Price *price.Price
	// At is where the store counted the request (bucket.Result.At) when a sliding window is
	// among its buckets, zero otherwise: their refunds land in its sub-window.
	At      time.Time
	Buckets []Bucket
}

// version starts every encoding, so that a replica of another version can refuse it; Decode
// reads the version before it too (r1: no profile word, an unweighted profile counting cache
// reads).
const version, version1, version3 = "r2", "r1", "r3"

// Encode renders r as one line of space-separated words:
//
//	r2 TAG LEASE PROMPT OUTPUT MODEL PROFILE {KIND ALG[SLOT][f][u] LIMIT PERIOD_MS BURST COST NAME}...
//	r3 TAG LEASE PROMPT OUTPUT MODEL PROFILE PRICE {KIND ...}...
//
// r3, with PRICE, is written only when r has a Price (a cost limit applied): INPUT/CACHED/
// WRITE/WRITE1H/OUTPUT/REQUEST in micro-units, so that a reservation without one reads as before.
// where PROFILE is the output weight in decimal followed by c when cache reads are free, m
// when the tokens were counted by characters, and @ with At in microseconds since the epoch
// when At is set, and
// ALG is the bucket's algorithm code (bucket.Spec.Code: t, s, d, m or c for a token
// bucket, sliding window, daily or monthly quota, concurrency), SLOT the digit of a token bucket's bucket.Spec.Slot (none for 0), then f marks
// feedback and u a refundable reservation, '-' stands for an empty lease, and TAG, MODEL and NAME have
// every byte outside '!'..'~' and '%' percent-escaped. A quota in a time zone (bucket.Spec.Zone)
// has z and the zone's IANA name, escaped likewise, for its PERIOD_MS ("zAmerica/Los_Angeles"):
// its settlement must find the same local period. Floors are not kept: refunds, charges and
// releases ignore them.
func Encode(r *Reservation) string {
	return string(Append(make([]byte, 0, 64+48*len(r.Buckets)), r))
}

// Append appends Encode's text of r to b.
func Append(b []byte, r *Reservation) []byte {
	if r.Price != nil {
		b = append(b, version3...)
	} else {
		b = append(b, version...)
	}
	b = append(b, ' ')
	b = escape(b, r.Tag)
	b = append(b, ' ')
	if r.Lease == "" {
		b = append(b, '-')
	} else {
		b = append(b, r.Lease...)
	}
	b = append(b, ' ')
	b = strconv.AppendInt(b, r.Prompt, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, r.Output, 10)
	b = append(b, ' ')
	b = escape(b, r.Model)
	b = append(b, ' ')
	b = strconv.AppendInt(b, max(r.Weight, 1), 10)
	if r.CacheReadsFree {
		b = append(b, 'c')
	}
	if r.CharsCounted {
		b = append(b, 'm')
	}
	if !r.At.IsZero() {
		b = strconv.AppendInt(append(b, '@'), r.At.UnixMicro(), 10)
	}
	if p := r.Price; p != nil {
		for i, v := range [...]int64{p.Input, p.CachedInput, p.CacheWrite, p.CacheWrite1h, p.Output, p.Request} {
			if i == 0 {
				b = append(b, ' ')
			} else {
				b = append(b, '/')
			}
			b = strconv.AppendInt(b, v, 10)
		}
	}
	for i := range r.Buckets {
		x := &r.Buckets[i]
		s := &x.Spec
		b = append(b, ' ', x.Kind, ' ', s.Code())
		if s.Slot > 0 {
			b = append(b, '0'+s.Slot)
		}
		if x.Feedback {
			b = append(b, 'f')
		}
		if x.Refund {
			b = append(b, 'u')
		}
		for j, v := range [...]int64{s.Limit, s.Period.Milliseconds(), s.Burst, s.Cost} {
			b = append(b, ' ')
			if j == 1 && s.Algorithm == bucket.Quota && s.Zone != nil {
				b = escape(append(b, 'z'), s.Zone.String())
				continue
			}
			b = strconv.AppendInt(b, v, 10)
		}
		b = append(b, ' ')
		b = escape(b, s.Name)
	}
	return b
}

// maxWeight bounds the output weight a reservation may carry.
const maxWeight = 1000

// ErrMalformed wraps every decoding error.
var ErrMalformed = errors.New("reservation: malformed")

// numErr is why a number did not parse (syntax or range), without the text: Decode's errors
// name the field, never its value.
func numErr(err error) error {
	var ne *strconv.NumError
	if errors.As(err, &ne) {
		return ne.Err
	}
	return err
}

// Decode parses what Encode wrote. Its errors say which field is malformed and why, never the
// field's text (bucket names carry tenant keys).
func Decode(s string) (*Reservation, error) {
	w := strings.Fields(s)
	head := 7
	var pr *price.Price
	switch {
	case len(w) > 0 && w[0] == version1:
		head = 6
	case len(w) >= 8 && w[0] == version3:
		p, err := decodePrice(w[7])
		if err != nil {
			return nil, err
		}
		pr = p
		// The price word read, the rest is r2's.
		w = append(w[:7:7], w[8:]...)
	case len(w) < 7 || w[0] != version:
		return nil, fmt.Errorf("%w: want %s and 6 fields", ErrMalformed, version)
	}
	if len(w) < head || (len(w)-head)%7 != 0 {
		return nil, fmt.Errorf("%w: %d words", ErrMalformed, len(w))
	}
	r := &Reservation{Weight: 1, Price: pr}
	var err error
	if r.Tag, err = unescape(w[1]); err != nil {
		return nil, err
	}
	if w[2] != "-" {
		r.Lease = w[2]
	}
	if r.Prompt, err = strconv.ParseInt(w[3], 10, 64); err != nil {
		return nil, fmt.Errorf("%w: prompt: %v", ErrMalformed, numErr(err))
	}
	if r.Output, err = strconv.ParseInt(w[4], 10, 64); err != nil {
		return nil, fmt.Errorf("%w: output: %v", ErrMalformed, numErr(err))
	}
	if r.Model, err = unescape(w[5]); err != nil {
		return nil, err
	}
	if head == 7 {
		p, at, timed := strings.Cut(w[6], "@")
		if timed {
			us, err := strconv.ParseInt(at, 10, 64)
			if err != nil || us <= 0 {
				return nil, fmt.Errorf("%w: profile: time not a positive number of microseconds", ErrMalformed)
			}
			r.At = time.UnixMicro(us)
		}
		if strings.HasSuffix(p, "m") {
			r.CharsCounted, p = true, p[:len(p)-1]
		}
		if strings.HasSuffix(p, "c") {
			r.CacheReadsFree, p = true, p[:len(p)-1]
		}
		if r.Weight, err = strconv.ParseInt(p, 10, 64); err != nil || r.Weight < 1 || r.Weight > maxWeight {
			return nil, fmt.Errorf("%w: profile: weight not in [1, %d]", ErrMalformed, maxWeight)
		}
	}
	w = w[head-6:] // the buckets start at w[6]
	n := (len(w) - 6) / 7
	if n > bucket.MaxBuckets {
		return nil, fmt.Errorf("%w: %d buckets", ErrMalformed, n)
	}
	r.Buckets = make([]Bucket, n)
	for i := range n {
		f := w[6+7*i : 13+7*i]
		x := &r.Buckets[i]
		if len(f[0]) != 1 || (!Tokenish(f[0][0]) && f[0][0] != KindRequests && f[0][0] != KindConcurrency && f[0][0] != KindCost) {
			return nil, fmt.Errorf("%w: bucket %d: unknown kind", ErrMalformed, i)
		}
		x.Kind = f[0][0]
		alg := f[1]
		if strings.HasSuffix(alg, "u") {
			x.Refund, alg = true, alg[:len(alg)-1]
		}
		if strings.HasSuffix(alg, "f") {
			x.Feedback, alg = true, alg[:len(alg)-1]
		}
		if len(alg) == 2 && alg[0] == bucket.CodeTokenBucket && alg[1] >= '1' && alg[1] <= '0'+bucket.MaxSlots {
			x.Spec.Slot, alg = alg[1]-'0', alg[:1]
		}
		if len(alg) != 1 || !x.Spec.SetCode(alg[0]) {
			return nil, fmt.Errorf("%w: bucket %d: unknown algorithm", ErrMalformed, i)
		}
		var v [4]int64
		for j := range v {
			if zone, ok := strings.CutPrefix(f[2+j], "z"); ok && j == 1 && x.Spec.Algorithm == bucket.Quota {
				// LoadLocation reads the zone's rules (tzdata) on each call: a few tens of
				// microseconds, on the response path of zoned quotas only.
				name, err := unescape(zone)
				if err == nil {
					x.Spec.Zone, err = time.LoadLocation(name)
				}
				if err != nil || name == "" {
					return nil, fmt.Errorf("%w: bucket %d: unknown time zone", ErrMalformed, i)
				}
				continue
			}
			if v[j], err = strconv.ParseInt(f[2+j], 10, 64); err != nil {
				return nil, fmt.Errorf("%w: bucket %d: %v", ErrMalformed, i, numErr(err))
			}
		}
		x.Spec.Limit, x.Spec.Period, x.Spec.Burst, x.Spec.Cost = v[0], time.Duration(v[1])*time.Millisecond, v[2], v[3]
		if x.Spec.Name, err = unescape(f[6]); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// decodePrice reads the PRICE word of r3.
func decodePrice(s string) (*price.Price, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 6 {
		return nil, fmt.Errorf("%w: price: want 6 prices", ErrMalformed)
	}
	var v [6]int64
	for i, p := range parts {
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil || n < 0 || n > bucket.MaxAmount {
			return nil, fmt.Errorf("%w: price %d: not in [0, %d]", ErrMalformed, i, int64(bucket.MaxAmount))
		}
		v[i] = n
	}
	return &price.Price{Input: v[0], CachedInput: v[1], CacheWrite: v[2], CacheWrite1h: v[3], Output: v[4], Request: v[5]}, nil
}

func escape(b []byte, s string) []byte {
	if s == "" {
		return append(b, '%')
	}
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c > '~' || c == '%' {
			b = append(b, '%', hex[c>>4], hex[c&15])
			continue
		}
		b = append(b, c)
	}
	return b
}

func unescape(s string) (string, error) {
	if s == "%" {
		return "", nil
	}
	if !strings.Contains(s, "%") {
		return s, nil
	}
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			out = append(out, s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("%w: truncated escape at byte %d", ErrMalformed, i)
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", fmt.Errorf("%w: bad escape at byte %d", ErrMalformed, i)
		}
		out = append(out, byte(v))
		i += 2
	}
	return string(out), nil
}
