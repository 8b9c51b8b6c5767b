package reconcile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/decisionlog"
	"github.com/llm-ratelimit/llm-ratelimit/internal/learn"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/dialects"
	"github.com/llm-ratelimit/llm-ratelimit/internal/reservation"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tracing"
)

// Store is what reconciliation needs of the shared store. bucket.Redis and bucket.Memory
// implement it.
type Store interface {
	Adjust(ctx context.Context, tag string, adj []bucket.Adjustment) error
	Lower(ctx context.Context, tag string, lv []bucket.Level) error
}

// Recorder receives every settlement of a reservation that carries an id
// (reservation.MetadataIDKey; internal/decisionlog.Log implements it), once the store applied
// it. Settlement must not block, nor keep r.
type Recorder interface {
	Settlement(r *decisionlog.Settlement)
}

// AttrCodeDetails is the Envoy attribute that tells who answered (ext_proc's
// response_attributes): "via_upstream" for the provider's own response, anything else
// ("response_timeout", "stream_idle_timeout", "upstream_reset_before_response_started{...}")
// for a reply Envoy made itself.
const AttrCodeDetails = "response.code_details"

// detailsViaUpstream is AttrCodeDetails of a response that came from the upstream.
const detailsViaUpstream = "via_upstream"

// Options configures a Server.
type Options struct {
	// Store is the shared store the reservations were taken in. Required.
	Store Store
	// Logger receives failures at warn and one line per settled response at debug. Default: none.
	Logger *zap.Logger
	// Metrics receives the reconciliation metrics. Default: not recorded.
	Metrics *Metrics
	// Timeout bounds each store call. Default 1s.
	Timeout time.Duration
	// MaxBody bounds what is kept of a JSON body, or of one SSE line, to find its usage.
	// Default 4 MiB; a larger response keeps its reservation.
	MaxBody int
	// Settlement is how responses settle; nil: DefaultSettlement. SetSettlement replaces it.
	Settlement *Settlement
	// MaxDecoded bounds the decoded bytes of one compressed reply. Default 64 MiB (a long
	// generation's event stream is a few MiB); a reply decoding to more keeps its reservation.
	MaxDecoded int64
	// MaxDecoders bounds the compressed replies decoded at once by this replica, each holding its
	// decoder's window (gzip and deflate 32 KiB, zstd at most 8 MiB, br at most 16 MiB). Default
	// 256; a reply beyond it keeps its reservation.
	MaxDecoders int
	// Recorder, when set, receives every settlement whose reservation has an id. Default: none.
	Recorder Recorder
	// Tracer, when set, traces every settlement of a reservation (internal/tracing): a span,
	// the child of the application's when its request carried a W3C traceparent. Default:
	// none, no spans.
	Tracer trace.Tracer
	// Now is the clock of the settlement records. Default time.Now.
	Now func() time.Time
	// Learner, when set, is given the provider's input count of every successful response
	// whose metadata carries the prompt's static estimate (reservation.MetadataStaticKey).
	// Default: none, nothing learned.
	Learner Learner
}

// Learner records a provider's count against the limiter's static estimate. *learn.Shared
// implements it; Observe must not block.
type Learner interface {
	Observe(k learn.Key, actual, estimate int64)
}

// Server serves envoy.service.ext_proc.v3.ExternalProcessor. It is safe for concurrent use.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer
	opts Options
	log  *zap.Logger
	m    *Metrics
	set  atomic.Pointer[Settlement]
	// decoders holds one token per compressed reply being decoded.
	decoders chan struct{}
}

var _ extprocv3.ExternalProcessorServer = (*Server)(nil)

// New returns a Server.
func New(opts Options) (*Server, error) {
	if opts.Store == nil {
		return nil, errors.New("reconcile: a Store is required")
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Timeout <= 0 {
		opts.Timeout = time.Second
	}
	if opts.MaxBody <= 0 {
		opts.MaxBody = 4 << 20
	}
	if opts.MaxDecoded <= 0 {
		opts.MaxDecoded = 64 << 20
	}
	if opts.MaxDecoders <= 0 {
		opts.MaxDecoders = 256
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	set := DefaultSettlement()
	if opts.Settlement != nil {
		set = *opts.Settlement
	}
	s := &Server{opts: opts, log: opts.Logger, m: opts.Metrics, decoders: make(chan struct{}, opts.MaxDecoders)}
	if err := s.SetSettlement(set); err != nil {
		return nil, err
	}
	return s, nil
}

// SetSettlement replaces the settlement for the responses that start after it. It is safe for
// concurrent use.
func (s *Server) SetSettlement(set Settlement) error {
	if err := set.Validate(); err != nil {
		return fmt.Errorf("reconcile: settlement: %w", err)
	}
	s.set.Store(&set)
	return nil
}

// stream is the state of one HTTP request's response path.
type stream struct {
	res *reservation.Reservation
	// rid is the reservation's id for the decision log ("" when none).
	rid string
	// exact says whether admission counted the prompt exactly: "true", "false", or "unknown"
	// when the metadata does not say (a metric label).
	exact string
	// static and reason are the prompt's static estimate and why it was estimated, from the
	// metadata, when admission learns its error (0 and "" otherwise).
	static int64
	reason string
	// learnOutput: a rule reserves the learned output; the completion's tokens are recorded.
	learnOutput bool
	malformed   bool // the reservation could not be read (reported once)
	rep         report
	body        parser
	settled     bool
	// set is the settlement in force when the stream started, for all of it.
	set *Settlement
	// dec decodes a compressed reply into body; nil for an uncompressed one.
	dec *decoder
	// undecodable is why a compressed reply cannot be read ("" when it can): it keeps its
	// reservation.
	undecodable Reason
	// responded is true once the response headers arrived: a stream that ends before them was
	// aborted before the response started (the client went away, or Envoy gave up).
	responded bool
	// retry reads the wait out of a provider 429's body, for a dialect whose 429 says it there
	// (retryReader); nil once read, or when the headers said it. The body is kept in body (raw),
	// decoded first when compressed.
	retry retryReader
	// traceparent and tracestate are the request's W3C trace context, read when tracing is on.
	traceparent, tracestate string
}

// retryReader is a dialect whose provider 429 gives its wait in the body rather than in a
// retry-after header (internal/provider/gemini: google.rpc.RetryInfo).
type retryReader interface {
	RetryAfter(id provider.ID, body []byte) (time.Duration, bool)
}

// maxErrorBody bounds what is kept of a 429 body to find its wait: Google's are under 2 KiB.
const maxErrorBody = 64 << 10

// Process handles one HTTP stream's messages. It answers each message at once (unless Envoy runs
// in observability mode, where nothing is answered) and settles the reservation when the response
// ends, or when the stream breaks. The stream may open with the request headers (the shipped
// envoy.yaml sends them, so that a request aborted before its response still ends a stream and
// releases its lease) or with the response headers.
func (s *Server) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	st := &stream{set: s.set.Load()}
	st.body.limit = s.opts.MaxBody
	defer func() {
		if st.dec != nil {
			st.dec.abort()
		}
		if !st.settled {
			// The stream ended before the response did (a reset, a timeout, Envoy gone, the
			// client went away).
			u, ok := s.cut(st)
			s.settle(st, u, ok)
		}
	}()
	for {
		req, err := srv.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
				return nil
			}
			return err
		}
		if s.opts.Tracer != nil && st.traceparent == "" {
			if h := req.GetRequestHeaders(); h != nil {
				st.traceparent, st.tracestate = traceContext(h.GetHeaders())
			}
		}
		if st.res == nil && !st.malformed {
			res, rid, err := reservationOf(req.GetMetadataContext())
			if err != nil {
				// Nothing can be settled: the reservation stays as charged and a lease expires
				// after its lease_ttl. Only a writer of another version or a bug gets here.
				st.malformed = true
				s.m.error(reasonMalformed)
				s.log.Warn("reconcile: reservation not readable, nothing settled",
					zap.String("reason", string(reasonMalformed)), zap.Error(err))
			}
			st.res, st.rid, st.exact = res, rid, exactOf(req.GetMetadataContext())
			st.static, st.reason = staticOf(req.GetMetadataContext())
			st.learnOutput = req.GetMetadataContext().GetFilterMetadata()[reservation.MetadataNamespace].
				GetFields()[reservation.MetadataLearnOutputKey].GetBoolValue()
			if st.res != nil && st.res.Lease != "" {
				s.m.leaseHeld(1)
			}
		}
		if !req.GetObservabilityMode() {
			if err := srv.Send(answer(req)); err != nil {
				return err
			}
		}
		if st.settled && st.retry == nil {
			continue
		}
		switch {
		case req.GetResponseHeaders() != nil:
			h := req.GetResponseHeaders()
			st.responded = true
			st.body.dialect = st.set.dialectOf(st.res)
			st.rep = readHeaders(headerGetter(h.GetHeaders()), st.body.dialect)
			st.body.frame(&st.rep)
			if d, ok := codeDetails(req.GetAttributes()); ok && d != detailsViaUpstream {
				st.rep.local = true
			}
			switch {
			case st.rep.local:
				// Envoy's own reply (a route or idle timeout, a reset, an overflow), not the
				// provider's: the provider may have received the request, generated and billed
				// it. Nothing is refunded and its headers say nothing of the provider's budget.
				s.settle(st, provider.Usage{}, false)
				continue
			case st.rep.status >= 400:
				// The provider refused or failed before generating: nothing was used. The refund
				// goes first, so that a 429's pause is not undone by it.
				s.settle(st, provider.Usage{}, true)
			case h.GetEndOfStream():
				s.settle(st, provider.Usage{}, false)
			case st.rep.encoding != "":
				s.startDecoding(st)
			}
			if s.awaitRetry(st, h.GetEndOfStream()) {
				continue // feedback when the body has said how long to wait
			}
			s.feedback(st)
		case st.retry != nil:
			// The rest of a 429 whose body says how long to wait; it settled with its headers.
			if b := req.GetResponseBody(); b != nil {
				if st.dec != nil {
					st.dec.write(b.GetBody())
				} else {
					st.body.write(b.GetBody())
				}
				if !b.GetEndOfStream() {
					continue
				}
			}
			s.retryFeedback(st)
		case req.GetResponseBody() != nil:
			b := req.GetResponseBody()
			switch {
			case st.dec != nil:
				st.dec.write(b.GetBody())
			case st.undecodable == "":
				st.body.write(b.GetBody())
			}
			if b.GetEndOfStream() || saidOver(st) {
				u, ok := s.end(st)
				s.settle(st, u, ok)
			}
		case req.GetResponseTrailers() != nil:
			u, ok := s.end(st)
			s.settle(st, u, ok)
		}
	}
}

// awaitRetry reports whether the feedback of a provider 429 waits for its body: the headers
// gave no wait, and the reservation's dialect reads one from the body. The body is kept whole
// (up to maxErrorBody), decoded as a usage-bearing reply is when compressed.
func (s *Server) awaitRetry(st *stream, ended bool) bool {
	rr, ok := st.body.dialect.(retryReader)
	if !ok || st.res == nil || st.rep.status != 429 || st.rep.retryAfter > 0 || st.rep.local {
		return false
	}
	st.retry = rr
	st.body.raw, st.body.limit = true, maxErrorBody
	if st.rep.encoding != "" && !ended {
		s.startDecoding(st)
	}
	if ended {
		s.retryFeedback(st)
	}
	return true
}

// retryFeedback applies the feedback of a 429 whose body has arrived: its wait pauses the
// buckets marked provider_feedback (Vertex AI's capacity 429, which names none, pauses them for
// the dialect's short backoff); a body that says none is a spending limit, as feedback counts it.
// A body that cannot be decoded says nothing.
func (s *Server) retryFeedback(st *stream) {
	var failed bool
	if st.dec != nil {
		failed = st.dec.finish() != nil
		st.dec = nil
	}
	body := st.body.buf // read once the decoder has written all of it
	if failed || st.undecodable != "" {
		body = nil
	}
	if d, ok := st.retry.RetryAfter(st.set.family(st.res.Tag), body); ok {
		st.rep.retryAfter = d
	}
	st.retry, st.body.buf = nil, nil
	s.feedback(st)
}

// startDecoding sets up the decoding of a compressed reply, or records why it cannot be read.
func (s *Server) startDecoding(st *stream) {
	c := parseCodings(st.rep.encoding, st.set.Decode)
	switch {
	case c.bad != "":
		st.undecodable = c.bad
	case c.n == 0:
		// identity
	default:
		select {
		case s.decoders <- struct{}{}:
			st.dec = startDecoder(c, &st.body, s.opts.MaxDecoded, func() { <-s.decoders })
		default:
			st.undecodable = reasonDecodeBusy
		}
	}
}

// end finishes the reply's body: its usage, if it was read to its end and reported one.
func (s *Server) end(st *stream) (provider.Usage, bool) {
	if st.dec != nil {
		if err := st.dec.finish(); err != nil {
			st.undecodable = decodeReason(err)
		}
		st.dec = nil
	}
	if st.undecodable != "" {
		// The reply's usage cannot be read: the reservation stays, as for a stream without
		// usage. Counted, and logged at debug: a fleet of clients asking for an unsupported
		// coding would otherwise fill the log.
		s.m.error(st.undecodable)
		if ce := s.log.Check(zap.DebugLevel, "reconcile: reply not decoded, the reservation stays"); ce != nil {
			ce.Write(zap.String("reason", string(st.undecodable)))
		}
		return provider.Usage{}, false
	}
	u, ok := st.body.end()
	if st.body.events != nil && st.body.events.skipped > 0 {
		s.m.error(reasonEventStreamOver)
	}
	if why := st.body.broken(); why != "" {
		// Counted, and logged at debug, as an undecodable reply.
		s.m.error(why)
		if ce := s.log.Check(zap.DebugLevel, "reconcile: reply framing broken, the reservation stays"); ce != nil {
			ce.Write(zap.String("reason", string(why)))
		}
	}
	return u, ok
}

// cut is the usage of a response whose stream ended before the response did: none, unless its
// event stream had already said that it was over. The OpenAI SDKs stop reading at data: [DONE]
// and close the connection, often before the reply's own end (its last chunk, a compressed
// stream's trailer) reaches Envoy; Envoy then resets the request and closes the stream without
// end_of_stream, after the usage and [DONE] passed. A reply cut before that point (a compressed
// one included, decoded as far as it came) keeps its reservation: the provider may have billed
// more than any partial report says. Called once the decoder, if any, has stopped.
func (s *Server) cut(st *stream) (provider.Usage, bool) {
	if !st.responded || st.rep.local || st.undecodable != "" {
		return provider.Usage{}, false
	}
	return st.body.cut()
}

// saidOver reports whether the reply's event stream has said, as far as it was read, that it is
// over (data: [DONE]): its usage is final, and settling now releases its lease at once, not
// when Envoy ends the stream, which for a client that hung up at [DONE] is its deferred close,
// seconds later. A compressed reply's decoder stops there (decodeInto), within the write of the
// chunk that carries it. A decoder that stopped on an error settles now too, as it would at the
// end: without usage.
func saidOver(st *stream) bool {
	if st.dec != nil {
		select {
		case <-st.dec.done:
			return true
		default:
			return false
		}
	}
	return st.body.done
}

// answer is the empty reply that lets Envoy continue at once.
func answer(req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	switch {
	case req.GetRequestHeaders() != nil:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{}}}
	case req.GetRequestBody() != nil:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{}}}
	case req.GetRequestTrailers() != nil:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}}
	case req.GetResponseHeaders() != nil:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}}
	case req.GetResponseBody() != nil:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}}
}

// codeDetails finds AttrCodeDetails among the attributes Envoy sent (keyed by the ext_proc
// filter's name); ok is false when Envoy was not configured to send it.
func codeDetails(attrs map[string]*structpb.Struct) (string, bool) {
	for _, s := range attrs {
		if v, ok := s.GetFields()[AttrCodeDetails]; ok {
			return v.GetStringValue(), true
		}
	}
	return "", false
}

// reservationOf decodes the reservation from the forwarded ext_authz metadata (nil when absent:
// an unlimited, denied or shadow-only request), with its id for the decision log ("" when none).
func reservationOf(md *corev3.Metadata) (*reservation.Reservation, string, error) {
	ns := md.GetFilterMetadata()[reservation.MetadataNamespace]
	v, ok := ns.GetFields()[reservation.MetadataKey]
	if !ok {
		return nil, "", nil
	}
	r, err := reservation.Decode(v.GetStringValue())
	return r, ns.GetFields()[reservation.MetadataIDKey].GetStringValue(), err
}

// exactOf is whether the forwarded ext_authz metadata says the prompt was counted exactly, as a
// metric label: "true", "false", or "unknown" without the field.
func exactOf(md *corev3.Metadata) string {
	v, ok := md.GetFilterMetadata()[reservation.MetadataNamespace].GetFields()[reservation.MetadataExactKey]
	if !ok {
		return exactUnknown
	}
	if _, ok := v.GetKind().(*structpb.Value_BoolValue); !ok {
		return exactUnknown
	}
	if v.GetBoolValue() {
		return "true"
	}
	return "false"
}

// staticOf is the static prompt estimate and the estimate's reason the forwarded ext_authz
// metadata carries when admission learns the estimate's error; 0 and "" without them, or for a
// value out of range.
func staticOf(md *corev3.Metadata) (int64, string) {
	f := md.GetFilterMetadata()[reservation.MetadataNamespace].GetFields()
	v, reason := f[reservation.MetadataStaticKey].GetNumberValue(), f[reservation.MetadataReasonKey].GetStringValue()
	if !(v >= 1 && v <= 1e15) || reason == "" || len(reason) > 64 {
		return 0, ""
	}
	return int64(v), reason
}

// exactUnknown is the exactness label of a settlement whose metadata does not say.
const exactUnknown = "unknown"

// Response is how a reservation's response ended, for Settle.
type Response struct {
	// Status is the response's HTTP status; 0: the stream ended before any response.
	Status int
	// Local: Envoy answered itself (a timeout, a reset), not the provider.
	Local bool
	// Usage is what the provider reported, when Found.
	Usage provider.Usage
	Found bool
}

// Settle settles r for a response that ended as resp, exactly as Process settles a stream (its
// provider feedback aside): for an offline replay of recorded settlements. It is safe for
// concurrent use.
func (s *Server) Settle(r *reservation.Reservation, resp Response) {
	st := &stream{res: r, set: s.set.Load(), responded: resp.Status != 0, exact: exactUnknown}
	st.rep.status, st.rep.local = resp.Status, resp.Local
	s.settle(st, resp.Usage, resp.Found)
}

// dialectOf is the dialect of the provider r was reserved for (its tag): the format of the
// usage and rate-limit headers of its response. Without a reservation nothing is settled, and
// the dialect is the one of a provider with no room of its own.
func (set *Settlement) dialectOf(r *reservation.Reservation) provider.Dialect {
	if r == nil {
		return dialects.Of(provider.Unknown)
	}
	return dialects.Of(set.family(r.Tag))
}

// family is the built-in provider whose dialect the provider tag speaks: itself, or a declared
// provider's family (Settlement.Declared); Unknown for any other tag.
func (set *Settlement) family(tag string) provider.ID {
	if id := provider.Parse(tag); id != provider.Unknown {
		return id
	}
	return set.Declared[tag]
}

// headerGetter looks headers up by lower-case name; Envoy sends raw_value (bytes) or value.
func headerGetter(hm *corev3.HeaderMap) func(string) (string, bool) {
	return func(name string) (string, bool) {
		for _, h := range hm.GetHeaders() {
			if h.GetKey() == name {
				if raw := h.GetRawValue(); len(raw) > 0 {
					return string(raw), true
				}
				return h.GetValue(), true
			}
		}
		return "", false
	}
}

// settle refunds or charges the reservation's token buckets and releases its lease, in one store
// call. Each token bucket settles to what the provider counted in its dimension (counted):
//
//   - a reply with usage: a refundable bucket gets back what the usage left unused, every token
//     bucket is charged the overage (but a tokens bucket counted by characters, whose admission
//     count is the provider's own); the usage is first bounded (Settlement.bound);
//   - a provider 4xx (429 included): a refundable bucket gets back all but
//     Settlement.KeepOnClientError of its reservation;
//   - a provider 5xx: a refundable bucket gets back everything;
//   - no usage found: nothing changes.
//
// A bucket without refund keeps its reservation in every case but overage (the provider counted
// it on arrival), and a request counted in a requests bucket stays counted. Metrics count what
// the store applied, after it did.
func (s *Server) settle(st *stream, u provider.Usage, found bool) {
	st.settled = true
	r := st.res
	if r == nil {
		s.m.settled(resultNoReservation, "", "")
		return
	}
	status := st.rep.status
	failed := status >= 400 && !st.rep.local
	clientError := failed && status < 500
	result := resultNoUsage
	switch {
	case !st.responded:
		result = resultNoResponse
	case st.rep.local:
		result = resultLocalReply
	case failed:
		result = resultUpstreamError
	case found:
		result = resultUsage
	}
	provider := r.Tag
	if s.opts.Tracer != nil {
		var span trace.Span
		_, span = s.opts.Tracer.Start(tracing.Parent(context.Background(), st.traceparent, st.tracestate), spanSettle)
		span.SetAttributes(attribute.String("llm_ratelimit.result", string(result)), attribute.String("llm_ratelimit.provider", provider),
			attribute.String("llm_ratelimit.model", r.Model), attribute.Int("http.response.status_code", status))
		defer span.End()
		if found {
			span.SetAttributes(attribute.Int64("llm_ratelimit.input_tokens", u.Input), attribute.Int64("llm_ratelimit.output_tokens", u.Output))
		}
	}
	actual := counted(r, u)
	if found && !failed {
		if b, why := st.set.bound(r.Prompt + r.Output*max(r.Weight, 1)); actual.max() > b {
			// An upstream reporting more than any answer to this request could use (a bug, a
			// hostile OpenAI-compatible server): charging it raw would lock the shared buckets.
			s.m.clamped(provider, why)
			s.log.Warn("reconcile: reported usage above its bound, clamped",
				zap.String("reason", why), zap.String("provider", provider),
				zap.Int64("reported", actual.max()), zap.Int64("bound", b))
			actual.clamp(b, r, u)
		}
	}
	adj := make([]bucket.Adjustment, 0, len(r.Buckets))
	// What this response gave back and charged in each dimension: the most of any one bucket
	// (several rules' buckets of one dimension settle the same tokens).
	var refund, overage dims
	// charged is what each cost bucket is left charged with, once adjusted (nil without one).
	var charged []int64
	for _, b := range r.Buckets {
		var d int64
		dim, _ := reservation.Dimension(b.Kind)
		switch {
		case b.Kind == reservation.KindConcurrency:
			if r.Lease != "" && b.Spec.Cost > 0 {
				adj = append(adj, bucket.Adjustment{Spec: b.Spec, Delta: 1, Lease: r.Lease})
			}
			continue
		case b.Kind == reservation.KindCost:
			// Money settles to what the provider bills: the usage's cost at the admission's
			// price, nothing for a failed call (the providers bill none), the reservation kept
			// when no usage is found (a cut stream may have been billed).
			switch {
			case failed:
				d = b.Spec.Cost
			case found && r.Price != nil:
				d = b.Spec.Cost - actual[dim]
			}
			charged = append(charged, b.Spec.Cost-d)
		case !reservation.Tokenish(b.Kind), failed && !b.Refund:
		case clientError:
			d = b.Spec.Cost - st.set.kept(b.Spec.Cost)
		case failed:
			d = b.Spec.Cost
		case found:
			d = b.Spec.Cost - actual[dim]
			if d > 0 && !b.Refund {
				// The rule keeps its reservation (refund: false): only overage is charged.
				d = 0
			}
			if d < 0 && dim == providerTokens && r.CharsCounted {
				d = 0
			}
		}
		if d != 0 {
			adj = append(adj, bucket.Adjustment{Spec: b.Spec, Delta: d, At: r.At})
			if d > 0 {
				refund[dim] = max(refund[dim], d)
			} else {
				overage[dim] = max(overage[dim], -d)
			}
		}
	}
	s.m.settled(result, provider, r.Model)
	if len(adj) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
		defer cancel()
		err := s.opts.Store.Adjust(ctx, r.Tag, adj)
		if r.Lease != "" {
			lerr := err
			if err != nil {
				lerr = s.release(r, adj)
			}
			s.m.leaseHeld(-1)
			s.m.released(lerr)
		}
		if err != nil {
			s.m.error(reasonAdjustFailed)
			s.log.Warn("reconcile: adjust failed; the reservation stays, the lease expires on its own",
				zap.String("reason", string(reasonAdjustFailed)), zap.Error(err))
			return
		}
	}
	if s.opts.Recorder != nil && st.rid != "" {
		s.record(st, u, found)
	}
	s.m.reconciled(provider, &refund, &overage)
	if charged != nil {
		i := 0
		for _, b := range r.Buckets {
			if b.Kind == reservation.KindCost {
				s.m.spent(ruleOf(b.Spec.Name), charged[i])
				i++
			}
		}
	}
	if found && !failed {
		s.m.usage(provider, r.Model, st.exact, r.Prompt, r.Output, u)
		if st.static > 0 && u.Input > 0 {
			s.m.static(provider, r.Model, st.reason, st.static, u.Input)
			if s.opts.Learner != nil {
				s.opts.Learner.Observe(learn.Key{Provider: r.Tag, Model: r.Model, Reason: st.reason}, u.Input, st.static)
			}
		}
		if st.learnOutput && u.Output > 0 && s.opts.Learner != nil {
			s.opts.Learner.Observe(learn.Key{Provider: r.Tag, Model: r.Model, Reason: learn.OutputReason}, u.Output, learn.OutputScale)
		}
	}
	if ce := s.log.Check(zap.DebugLevel, "settled"); ce != nil {
		ce.Write(zap.String("result", string(result)), zap.String("provider", provider),
			zap.Int64("estimate", r.Prompt+r.Output), zap.Int64("actual", actual[providerTokens]), zap.Int("status", status))
	}
}

// record gives the settlement the store applied to the Recorder, stamped with the store's answer.
func (s *Server) record(st *stream, u provider.Usage, found bool) {
	r := st.res
	rec := decisionlog.Settlement{Time: s.opts.Now(), ReservationID: st.rid, Provider: r.Tag, Model: r.Model,
		Status: st.rep.status, Local: st.rep.local, Found: found}
	if !st.responded {
		rec.Status = 0
	}
	if found {
		rec.Input, rec.Output, rec.CacheRead, rec.CacheWrite, rec.Total = u.Input, u.Output, u.CacheRead, u.CacheWrite, u.Total
	}
	s.opts.Recorder.Settlement(&rec)
}

// release retries, alone, the lease releases of a failed Adjust: a slot that stays taken costs the
// whole fleet a place until lease_ttl, and releasing is idempotent (the refunds are not, so they are
// never retried).
func (s *Server) release(r *reservation.Reservation, adj []bucket.Adjustment) error {
	leases := make([]bucket.Adjustment, 0, 1)
	for _, a := range adj {
		if a.Spec.Algorithm == bucket.Concurrency {
			leases = append(leases, a)
		}
	}
	if len(leases) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	return s.opts.Store.Adjust(ctx, r.Tag, leases)
}

// feedback lowers the provider_feedback buckets to what the provider reports of each one's
// dimension, and pauses them after a provider 429 that says when to retry. A 429 without
// retry-after is no rate limit (Anthropic's spend limit, OpenAI's insufficient_quota): it pauses
// nothing, and is counted as a spend_cap correction.
func (s *Server) feedback(st *stream) {
	r := st.res
	if r == nil {
		return
	}
	var lv []bucket.Level
	kind := ""
	spendCap := st.rep.status == 429 && st.rep.retryAfter <= 0
	for _, b := range r.Buckets {
		dim, ok := reservation.Dimension(b.Kind)
		if !b.Feedback || !ok {
			continue
		}
		target, ok := lowerTarget(st.rep, dim, b.Spec.Limit)
		if st.rep.status == 429 && st.rep.retryAfter > 0 && b.Spec.Algorithm != bucket.Quota {
			p := pauseTarget(b.Spec.Cost, b.Spec.Limit, b.Spec.Period, st.rep.retryAfter)
			if !ok || p < target {
				target, ok = p, true
			}
			kind = correctionPause
		}
		if !ok {
			continue
		}
		lv = append(lv, bucket.Level{Spec: b.Spec, Remaining: max(target, -bucket.MaxAmount)})
	}
	if spendCap {
		s.m.corrected(r.Tag, correctionSpendCap)
	}
	if len(lv) == 0 {
		return
	}
	if kind == "" {
		kind = correctionLower
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	if err := s.opts.Store.Lower(ctx, r.Tag, lv); err != nil {
		s.m.error(reasonLowerFailed)
		s.log.Warn("reconcile: provider feedback not applied", zap.String("reason", string(reasonLowerFailed)), zap.Error(err))
		return
	}
	s.m.corrected(r.Tag, kind)
}
