package filter

import (
	"fmt"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/llm-ratelimit/llm-ratelimit/internal/authzwire"
	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
	"github.com/llm-ratelimit/llm-ratelimit/internal/price"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/dialects"
	"github.com/llm-ratelimit/llm-ratelimit/internal/reservation"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tokens"
)

// Decisions, as metric label values and in dynamic metadata.
const (
	decisionAllowed     = "allowed"        // every bucket paid
	decisionDelayed     = "delayed"        // held for max_wait, then allowed
	decisionDenied      = "denied"         // 429
	decisionTooLarge    = "too_large"      // 413: can never fit
	decisionShadow      = "shadow"         // allowed whatever the buckets said
	decisionUnlimited   = "unlimited"      // no rule applies
	decisionFailOpen    = "fail_open"      // store unreachable, failure.mode allow
	decisionLocal       = "local"          // store unreachable, allowed by the local share
	decisionUnavailable = "unavailable"    // store unreachable, 503
	decisionBadRoute    = "bad_route"      // invalid context_extensions, 500
	decisionBadIdentity = "bad_identity"   // an identity header given twice, 400
	decisionUnknown     = "unknown_denied" // no known provider's API under unknown: deny, 403
	// decisionUnidentified: no identity (a claim, an API key) while tenant.missing is deny, 401.
	decisionUnidentified = "unidentified"
	// decisionSpent: a money budget (a cost limit) is spent until its period renews, 429 not
	// to be retried.
	decisionSpent = "spent"
	// decisionUnpriced: a cost limit applies and the model has no price, 403.
	decisionUnpriced = "unpriced"
)

// forwarded is true for the decisions that send the request on to the provider.
func forwarded(decision string) bool {
	switch decision {
	case decisionAllowed, decisionDelayed, decisionShadow, decisionUnlimited, decisionFailOpen, decisionLocal:
		return true
	}
	return false
}

func header(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: k, Value: v},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}

// resetString formats a duration as OpenAI's x-ratelimit-reset-* headers do ("1s", "6m0s",
// "20ms"): Go's duration format, to the millisecond, rounded up like retry-after-ms, so that
// a client waiting what the message says is never early.
func resetString(d time.Duration) string {
	var buf [32]byte
	return string(appendReset(buf[:0], d))
}

// appendReset appends resetString(d): Duration.String of d rounded up to the millisecond,
// written here for whole milliseconds so that it needs no string of its own
// (TestAppendReset holds it to Duration.String).
func appendReset(b []byte, d time.Duration) []byte {
	if d <= 0 {
		return append(b, "0s"...)
	}
	ms := int64((d + time.Millisecond - 1) / time.Millisecond)
	if ms < 1000 {
		return append(strconv.AppendInt(b, ms, 10), "ms"...)
	}
	h, m, s, frac := ms/3_600_000, ms/60_000%60, ms/1000%60, ms%1000
	if h > 0 {
		b = append(strconv.AppendInt(b, h, 10), 'h')
	}
	if h > 0 || m > 0 {
		b = append(strconv.AppendInt(b, m, 10), 'm')
	}
	b = strconv.AppendInt(b, s, 10)
	if frac > 0 {
		digits := [3]byte{byte('0' + frac/100), byte('0' + frac/10%10), byte('0' + frac%10)}
		n := 3
		for digits[n-1] == '0' {
			n--
		}
		b = append(append(b, '.'), digits[:n]...)
	}
	return append(b, 's')
}

// headers are the rate-limit headers of an answer, in the provider's own names for each
// dimension (dialect RateHeaders: x-ratelimit-*-{tokens,requests} for OpenAI's family,
// anthropic-ratelimit-{tokens,input-tokens,output-tokens,requests}-* on Anthropic's Messages
// API): for each dimension, the limit, remaining and reset of the bucket with the least
// remaining. The headers share two backing arrays and their values one string (three
// allocations however many); callers append the extra ones. A bare plan has none.
func (pl *plan) headers(est *tokens.Estimate, res *bucket.Result, extra int) []*corev3.HeaderValueOption {
	if pl.bare {
		return nil
	}
	var keys [3 * provider.Dimensions]string
	var ends [3 * provider.Dimensions]int
	var buf [256]byte
	text, n := buf[:0], 0
	d := dialects.Of(est.Provider)
	for dim := range provider.Dimensions {
		h, ok := d.RateHeaders(est.API, dim)
		if !ok {
			continue
		}
		s, ok := pl.headline(res, reservation.KindOf(dim))
		if !ok {
			continue
		}
		text = strconv.AppendInt(text, s.Limit, 10)
		keys[n], ends[n] = h.Limit, len(text)
		text = strconv.AppendInt(text, max(s.Remaining, 0), 10)
		keys[n+1], ends[n+1] = h.Remaining, len(text)
		if h.ResetAt {
			// The instant the bucket is full again, by the filter's clock.
			text = pl.clock().Add(max(s.Reset, 0)).UTC().Truncate(time.Second).AppendFormat(text, time.RFC3339)
		} else {
			text = appendReset(text, s.Reset)
		}
		keys[n+2], ends[n+2] = h.Reset, len(text)
		n += 3
	}
	out := make([]*corev3.HeaderValueOption, n, n+extra)
	if n == 0 {
		return out
	}
	opts := make([]corev3.HeaderValueOption, n)
	vals := make([]corev3.HeaderValue, n)
	all, start := string(text), 0
	for i := range n {
		vals[i].Key, vals[i].Value = keys[i], all[start:ends[i]]
		opts[i].Header, opts[i].AppendAction = &vals[i], corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
		out[i], start = &opts[i], ends[i]
	}
	return out
}

// Answer is one decision's reply to Check: a CheckResponse whose dynamic metadata is kept as
// values until it is encoded, straight to the wire by AppendTo on the service's path (no
// Struct, map or Value is built for it), or decoded into a Struct by Response. It implements
// authzwire.Answer. An Answer is not changed once returned: its methods are safe for concurrent
// use, but for the first call of Response, which fills the message in.
type Answer struct {
	resp *authv3.CheckResponse // without DynamicMetadata
	meta metadata
}

var _ authzwire.Answer = (*Answer)(nil)

// AppendTo appends the protobuf encoding of the answer's CheckResponse to b, growing b once,
// its metadata written straight from its values (authzwire.AppendResponse). It returns b
// unchanged and false when the response holds what that encoder declines; the caller then
// encodes Response with proto.Marshal.
func (a *Answer) AppendTo(b []byte) ([]byte, bool) {
	if a == nil || a.resp == nil {
		return b, false
	}
	var scratch [1024]byte // the metadata, whose size the response's framing needs first
	return authzwire.AppendResponse(b, a.resp, a.meta.append(scratch[:0]))
}

// okAnswer and deniedAnswer allocate an Answer and its response's messages as one object.
type okAnswer struct {
	Answer
	resp   authv3.CheckResponse
	status rpcstatus.Status
	ok     authv3.CheckResponse_OkResponse
	okHTTP authv3.OkHttpResponse
}

type deniedAnswer struct {
	Answer
	resp       authv3.CheckResponse
	status     rpcstatus.Status
	denied     authv3.CheckResponse_DeniedResponse
	deniedHTTP authv3.DeniedHttpResponse
	httpStatus typev3.HttpStatus
}

// Response returns the answer as a CheckResponse, its metadata decoded into a Struct from the
// encoding AppendTo writes. It returns the same message on every call.
func (a *Answer) Response() *authv3.CheckResponse {
	if a.resp.DynamicMetadata == nil {
		md := &structpb.Struct{}
		if err := proto.Unmarshal(a.meta.append(nil), md); err != nil {
			// Not reached: every string is made valid UTF-8 (TestAnswerAppendTo).
			md = &structpb.Struct{Fields: map[string]*structpb.Value{
				"decision":       structpb.NewStringValue(a.meta.decision),
				"metadata_error": structpb.NewStringValue(err.Error()),
			}}
		}
		a.resp.DynamicMetadata = md
	}
	return a.resp
}

// Reservation is the reservation the answer carries for the response path (what its metadata
// encodes, internal/reservation), nil when it holds none: what an offline replay settles. It is
// the caller's.
func (a *Answer) Reservation() *reservation.Reservation {
	if a.meta.pl == nil {
		return nil
	}
	r, ok := a.meta.pl.reservation(&a.meta.est, nil)
	if !ok {
		return nil
	}
	return &r
}

// Decision is the answer's decision, as in its metadata and metrics ("allowed", "denied"...).
func (a *Answer) Decision() string { return a.meta.decision }

func okResponse(hdrs []*corev3.HeaderValueOption, md metadata) *Answer {
	m := &okAnswer{}
	m.status.Code = int32(codes.OK)
	m.okHTTP.ResponseHeadersToAdd = hdrs
	m.ok.OkResponse = &m.okHTTP
	m.resp.Status, m.resp.HttpResponse = &m.status, &m.ok
	m.Answer.resp, m.meta = &m.resp, md
	return &m.Answer
}

func deniedResponse(code codes.Code, httpStatus typev3.StatusCode, hdrs []*corev3.HeaderValueOption, body []byte, md metadata) *Answer {
	m := &deniedAnswer{}
	m.status.Code = int32(code)
	m.httpStatus.Code = httpStatus
	m.deniedHTTP.Status = &m.httpStatus
	m.deniedHTTP.Headers = append(hdrs, header("content-type", "application/json"))
	m.deniedHTTP.Body = string(body)
	m.denied.DeniedResponse = &m.deniedHTTP
	m.resp.Status, m.resp.HttpResponse = &m.status, &m.denied
	m.Answer.resp, m.meta = &m.resp, md
	return &m.Answer
}

// errorBody renders an error in the format of the API the client called, which its SDK parses:
// the dialect of the request's provider decides it (internal/provider/dialects).
func errorBody(est *tokens.Estimate, e provider.Error) []byte {
	return dialects.Of(est.Provider).AppendError(nil, est.API, e)
}

// errorHeaderer is a dialect whose SDKs read an error's kind from a header of the answer
// (Bedrock's x-amzn-ErrorType, which the AWS SDKs read before the body).
type errorHeaderer interface {
	ErrorHeader(api provider.API, c provider.Class) (name, value string, ok bool)
}

// withErrorHeader appends the error-kind header of the request's dialect for class c, if it
// has one.
func withErrorHeader(hdrs []*corev3.HeaderValueOption, est *tokens.Estimate, c provider.Class) []*corev3.HeaderValueOption {
	if d, ok := dialects.Of(est.Provider).(errorHeaderer); ok {
		if k, v, ok := d.ErrorHeader(est.API, c); ok {
			hdrs = append(hdrs, header(k, v))
		}
	}
	return hdrs
}

// rateLimitedResponse is the 429 of a denial: Retry-After in whole seconds rounded up and in
// milliseconds, the x-ratelimit headers, and a message naming the exhausted limit.
func rateLimitedResponse(est *tokens.Estimate, pl *plan, res *bucket.Result, wait time.Duration) *Answer {
	if i := res.Blocking; i >= 0 && i < len(pl.owners) && pl.owners[i].kind == reservation.KindCost {
		return spentResponse(est, pl, res)
	}
	if pl.bare {
		return deniedResponse(codes.ResourceExhausted, typev3.StatusCode_TooManyRequests, nil, nil,
			pl.metadata(est, decisionDenied, wait))
	}
	ms := (wait + time.Millisecond - 1) / time.Millisecond
	secs := (wait + time.Second - 1) / time.Second
	if secs < 1 {
		secs = 1
	}
	hdrs := pl.headers(est, res, 4)
	hdrs = append(hdrs,
		header("retry-after", strconv.FormatInt(int64(secs), 10)),
		header("retry-after-ms", strconv.FormatInt(int64(ms), 10)),
		header("x-should-retry", "true"))
	hdrs = withErrorHeader(hdrs, est, provider.RateLimited)
	limit, msg := provider.Tokens.String(), "Rate limit reached. Please try again in "+resetString(wait)+"."
	if i := res.Blocking; i >= 0 && i < len(pl.owners) && i < len(res.Buckets) {
		o, s := pl.owners[i], res.Buckets[i]
		kind := kindName(o.kind)
		if d, ok := reservation.Dimension(o.kind); ok {
			limit = d.String()
		} else {
			limit = "concurrent_requests"
		}
		l := o.lim
		requested := pl.enforced.Buckets[i].Cost
		reserve := ""
		if pl.floor > 0 {
			reserve = fmt.Sprintf(" (of which priority %s may not use the last %d)", pl.priority, int64(pl.floor*float64(s.Limit)))
		}
		msg = fmt.Sprintf("Rate limit reached for %s (%s %s): Limit %d, Remaining %d%s, Requested %d. Please try again in %s.",
			o.rule.Name, kind, periodName(l), s.Limit, max(s.Remaining, 0), reserve, requested, resetString(wait))
	}
	body := errorBody(est, provider.Error{Class: provider.RateLimited, Limit: limit, Code: "rate_limit_exceeded", Message: msg, RetryAfter: wait})
	return deniedResponse(codes.ResourceExhausted, typev3.StatusCode_TooManyRequests, hdrs, body,
		pl.metadata(est, decisionDenied, wait))
}

// tooLargeResponse answers a request that can never fit: 413, no Retry-After, and
// x-should-retry: false so that the SDKs do not retry it.
func tooLargeResponse(est *tokens.Estimate, pl *plan, res *bucket.Result) *Answer {
	msg := "Request too large for the configured limits."
	if i := res.Blocking; i >= 0 && i < len(pl.owners) {
		o := pl.owners[i]
		l := o.lim
		msg = fmt.Sprintf("Request too large for %s (%s %s): Limit %d, Requested %d. The request can never fit: reduce the prompt or max_tokens.",
			o.rule.Name, kindName(o.kind), periodName(l), l.Capacity(), pl.enforced.Buckets[i].Cost)
		if o.kind == reservation.KindCost {
			msg = fmt.Sprintf("Request too large for %s (%s %s): Limit %s %s, the request may cost up to %s %s. The request can never fit: reduce the prompt or max_tokens.",
				o.rule.Name, kindName(o.kind), periodName(l), price.FormatMoney(l.Capacity()), config.Currency,
				price.FormatMoney(pl.enforced.Buckets[i].Cost), config.Currency)
		}
	}
	hdrs := pl.headers(est, res, 2)
	hdrs = withErrorHeader(append(hdrs, header("x-should-retry", "false")), est, provider.TooLarge)
	body := errorBody(est, provider.Error{Class: provider.TooLarge, Code: "request_too_large", Message: msg})
	return deniedResponse(codes.ResourceExhausted, typev3.StatusCode_PayloadTooLarge, hdrs, body,
		pl.metadata(est, decisionTooLarge, 0))
}

// unavailableResponse answers while the store cannot decide and failure.mode denies: 503, which
// the SDKs retry.
func unavailableResponse(est *tokens.Estimate, pl *plan) *Answer {
	body := errorBody(est, provider.Error{Class: provider.Unavailable, Code: "rate_limiter_unavailable",
		Message: "The rate limiter cannot reach its store. Please try again shortly."})
	hdrs := withErrorHeader([]*corev3.HeaderValueOption{header("retry-after", "1"), header("x-should-retry", "true")}, est, provider.Unavailable)
	return deniedResponse(codes.Unavailable, typev3.StatusCode_ServiceUnavailable, hdrs, body, pl.metadata(est, decisionUnavailable, 0))
}

// badRouteResponse answers a request whose route carries invalid context_extensions: 500.
func badRouteResponse(est *tokens.Estimate, err error) *Answer {
	body := errorBody(est, provider.Error{Class: provider.Misconfigured, Code: "rate_limiter_misconfigured",
		Message: "The rate limiter's route configuration is invalid: " + err.Error()})
	hdrs := withErrorHeader([]*corev3.HeaderValueOption{header("x-should-retry", "false")}, est, provider.Misconfigured)
	return deniedResponse(codes.Internal, typev3.StatusCode_InternalServerError, hdrs, body, (*plan)(nil).metadata(est, decisionBadRoute, 0))
}

// badIdentityResponse refuses a request whose identity header (tenant or priority) came more
// than once: Envoy joins repeated headers with a comma, and a joined value names no tenant. The
// error is the provider's own for a malformed request (400, invalid_request_error): OpenAI,
// https://platform.openai.com/docs/guides/error-codes; Anthropic,
// https://docs.anthropic.com/en/api/errors. The SDKs do not retry a 400.
func badIdentityResponse(est *tokens.Estimate, name string) *Answer {
	body := errorBody(est, provider.Error{Class: provider.InvalidRequest, Code: string(reasonDuplicateIdentity),
		Message: "The " + name + " header must be given once: a request names one identity."})
	hdrs := withErrorHeader([]*corev3.HeaderValueOption{header("x-should-retry", "false")}, est, provider.InvalidRequest)
	return deniedResponse(codes.InvalidArgument, typev3.StatusCode_BadRequest, hdrs, body, (*plan)(nil).metadata(est, decisionBadIdentity, 0))
}

// unknownResponse refuses a request that is no known provider's API, under unknown: deny. The
// SDKs do not retry a 403.
func unknownResponse(est *tokens.Estimate) *Answer {
	body := errorBody(est, provider.Error{Class: provider.Forbidden, Code: "unknown_api",
		Message: "The rate limiter knows no provider API at this host and path, and its policy (unknown: deny) refuses such requests."})
	hdrs := []*corev3.HeaderValueOption{header("x-should-retry", "false")}
	return deniedResponse(codes.PermissionDenied, typev3.StatusCode_Forbidden, hdrs, body, (*plan)(nil).metadata(est, decisionUnknown, 0))
}

// unidentifiedResponse is the 401 of a request that carries no identity while tenant.missing is
// deny: what names the identity sought ("the JWT claim [\"org_id\"]", "a provider API key").
func unidentifiedResponse(est *tokens.Estimate, what string) *Answer {
	body := errorBody(est, provider.Error{Class: provider.Unauthenticated, Code: string(reasonUnidentified),
		Message: "The request carries no verified identity (" + what + "): the rate limiter cannot tell whose budget it is."})
	hdrs := []*corev3.HeaderValueOption{header("x-should-retry", "false")}
	return deniedResponse(codes.Unauthenticated, typev3.StatusCode_Unauthorized, hdrs, body, (*plan)(nil).metadata(est, decisionUnidentified, 0))
}

// metadata describes the decision and the reservation for access logs and the response path:
// the values of the answer's dynamic metadata, which fields lists.
type metadata struct {
	decision string
	est      tokens.Estimate
	pl       *plan // nil: no rules applied (a bad route)
	wait     time.Duration
}

// metadata is the metadata of an answer of pl (which may be nil).
func (pl *plan) metadata(est *tokens.Estimate, decision string, wait time.Duration) metadata {
	return metadata{decision: decision, est: *est, pl: pl, wait: wait}
}

// append appends the metadata's encoding, the fields of a Struct: the one list of what the
// metadata holds. It is the only encoding: Response decodes it into a Struct. It stays here,
// not in authzwire, because what the metadata says is the decision's content; authzwire
// only writes the Struct's fields.
func (m *metadata) append(b []byte) []byte {
	est, pl := &m.est, m.pl
	b = authzwire.AppendStringField(b, "decision", m.decision)
	b = authzwire.AppendStringField(b, "provider", est.ProviderName())
	b = authzwire.AppendStringField(b, "api", est.API.String())
	b = authzwire.AppendStringField(b, "model", safeLabel(est.Model))
	b = authzwire.AppendNumberField(b, "prompt_tokens", float64(est.PromptTokens))
	b = authzwire.AppendNumberField(b, "output_tokens", float64(est.OutputTokens))
	cost := est.Cost()
	if pl != nil {
		cost = pl.cost[provider.Tokens] // as the provider's profile counts it (cost.go)
	}
	b = authzwire.AppendNumberField(b, "cost", float64(cost))
	if pl != nil && pl.price != nil {
		// The most the request can cost, reserved in its money budgets (micro-units of USD).
		b = authzwire.AppendNumberField(b, "spend_reserved_micros", float64(pl.cost[provider.Cost]))
	}
	b = authzwire.AppendBoolField(b, reservation.MetadataExactKey, est.Exact)
	if est.CacheRead > 0 {
		b = authzwire.AppendNumberField(b, "cache_read_tokens", float64(est.CacheRead))
	}
	if est.Reason != "" {
		b = authzwire.AppendStringField(b, reservation.MetadataReasonKey, string(est.Reason))
	}
	if est.Static > 0 {
		b = authzwire.AppendNumberField(b, reservation.MetadataStaticKey, float64(est.Static))
	}
	if pl != nil {
		// The tenant charged, as the access log may name it: its hash unless tenant.log is clear.
		if pl.logClearTenant {
			b = authzwire.AppendStringField(b, "tenant", pl.tenant)
		} else {
			var h [16]byte
			b = authzwire.AppendASCIIField(b, "tenant", appendTenantHash(h[:0], pl.tenant))
		}
		b = authzwire.AppendStringField(b, "priority", pl.priority)
		if pl.tenantPlan != nil {
			b = authzwire.AppendStringField(b, "plan", pl.tenantPlan.Name)
		}
		b = authzwire.AppendStringField(b, "rules", pl.ruleNames())
		b = authzwire.AppendStringField(b, "tag", pl.enforced.Tag)
		if pl.learnOutput {
			b = authzwire.AppendBoolField(b, reservation.MetadataLearnOutputKey, true)
		}
		if len(pl.enforced.Buckets) > 0 && (m.decision == decisionAllowed || m.decision == decisionDelayed) {
			b = appendBucketNames(b, "buckets", pl.enforced.Buckets)
		}
		if l := pl.blocking(); l != "" {
			b = authzwire.AppendStringField(b, "limit", l)
		}
		var rs [512]byte
		if r := pl.appendReservation(rs[:0], est); len(r) > 0 {
			b = authzwire.AppendASCIIField(b, reservation.MetadataKey, r)
			if pl.rid != "" {
				b = authzwire.AppendASCIIField(b, reservation.MetadataIDKey, []byte(pl.rid))
			}
		}
		if len(pl.shadow.Buckets) > 0 || pl.shadowAll {
			o := pl.shadowOutcome
			if pl.shadowAll {
				o = pl.result.Outcome
			}
			b = authzwire.AppendStringField(b, "shadow_outcome", o.String())
		}
	}
	if m.wait > 0 {
		b = authzwire.AppendNumberField(b, "wait_ms", float64(m.wait.Milliseconds()))
	}
	return b
}

// appendBucketNames appends the metadata field k listing the names of specs, each once where
// neighbours share one (a rule's tokens and requests, kindPair).
func appendBucketNames(b []byte, k string, specs []bucket.Spec) []byte {
	var buf [bucket.MaxBuckets]string // on the stack: a plan holds at most MaxBuckets
	names := buf[:0]
	for i := range specs {
		if i == 0 || specs[i].Name != specs[i-1].Name {
			names = append(names, specs[i].Name)
		}
	}
	return authzwire.AppendListField(b, k, names)
}

// safeLabel bounds a client-supplied value (model, tenant) for logs, metadata and labels: at most
// 64 bytes of printable ASCII, anything else replaced by '_'.
func safeLabel(s string) string {
	const n = 64
	clean := len(s) <= n
	for i := 0; clean && i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			clean = false
		}
	}
	if clean {
		return s
	}
	b := make([]byte, 0, n+3)
	for i := 0; i < len(s) && len(b) < n; i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e {
			c = '_'
		}
		b = append(b, c)
	}
	if len(s) > n {
		b = append(b, "..."...)
	}
	return string(b)
}
