package main

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Bedrock is the mock's Amazon Bedrock runtime (bedrock-runtime.{region}.amazonaws.com): the
// Converse and InvokeModelWithResponseStream operations, with the runtime's own accounting and
// the mock's own counting (never the limiter's):
//
//   - one tokens-per-minute quota per model id, a token bucket refilled continuously;
//   - "The burndown rate for the following models is 5x for output tokens (1 output token
//     consumes 5 tokens from your quotas)": Claude Opus 4, Sonnet 4 and the later Claude
//     models, 1x for the others (docs.aws.amazon.com/bedrock/latest/userguide/
//     quotas-token-burndown.html);
//   - a request reserves its input plus max_tokens at the start, and is adjusted at the end to
//     its input plus its output times the burndown rate (same page);
//   - over the quota the answer is 429 with x-amzn-ErrorType: ThrottlingException and
//     {"message": ...}, what botocore reads as throttling (the error shapes of
//     docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html);
//   - InvokeModelWithResponseStream answers in the AWS event stream encoding
//     (application/vnd.amazon.eventstream), written by eventMessage below, each chunk's bytes
//     one event of Anthropic's Messages stream and the last one carrying
//     amazon-bedrock-invocationMetrics (API_runtime_InvokeModelWithResponseStream.html).
type Bedrock struct {
	TPM    int64
	Period time.Duration

	mu      sync.Mutex
	buckets map[string]*bucket // by model id
}

// bedrockHost reports whether host (with or without a port) is a Bedrock runtime endpoint.
func bedrockHost(host string) bool {
	h, _, _ := strings.Cut(strings.ToLower(host), ":")
	return strings.HasPrefix(h, "bedrock-runtime.") && strings.HasSuffix(h, ".amazonaws.com")
}

// bedrockOp splits /model/{modelId}/{operation}, the modelId URL-decoded.
func bedrockOp(p string) (model, op string, ok bool) {
	rest, ok := strings.CutPrefix(p, "/model/")
	if !ok {
		return "", "", false
	}
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 {
		return "", "", false
	}
	m, err := url.PathUnescape(rest[:i])
	if err != nil {
		return "", "", false
	}
	return m, rest[i+1:], true
}

// fiveX matches the model ids whose output burns 5x: the Claude 4-era families
// (anthropic.claude-{opus,sonnet,haiku}-{4 or later}), in any id that names them.
var fiveX = regexp.MustCompile(`anthropic\.claude-(opus|sonnet|haiku)-([4-9]|[1-9][0-9])`)

func burndown(model string) int64 {
	if fiveX.MatchString(model) {
		return 5
	}
	return 1
}

// admit reserves cost from model's quota when it fits now; else it returns how long until it
// would, and whether it can ever fit.
func (b *Bedrock) admit(model string, cost int64, now time.Time) (wait time.Duration, fits bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.TPM <= 0 {
		return 0, true
	}
	if b.buckets == nil {
		b.buckets = map[string]*bucket{}
	}
	q := b.buckets[model]
	if q == nil {
		q = newBucket(b.TPM, b.Period, now)
		b.buckets[model] = q
	}
	w, ok := q.wait(now, cost)
	if ok && w == 0 {
		q.debit(now, cost)
	}
	return w, ok
}

// settle adjusts model's quota by delta tokens (the end-of-request adjustment).
func (b *Bedrock) settle(model string, delta int64, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if q := b.buckets[model]; q != nil {
		q.debit(now, delta)
	}
}

// bedrockBody is what the mock reads of a Converse body or of Claude's InvokeModel body.
type bedrockBody struct {
	System   json.RawMessage `json:"system"`
	Messages []struct {
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	InferenceConfig struct {
		MaxTokens *int64 `json:"maxTokens"`
	} `json:"inferenceConfig"`
	MaxTokens *int64 `json:"max_tokens"`
}

// textsOf reads a system prompt or a message's content: a string, or blocks with "text".
func textsOf(raw json.RawMessage) []string {
	if len(raw) == 0 {
		return nil
	}
	var t text
	if json.Unmarshal(raw, &t) != nil {
		return nil
	}
	return t
}

// price counts the prompt's texts like the mock counts Anthropic's (cl100k_base x the factor).
func (s *Server) bedrockPrice(model string, body []byte) (*Price, error) {
	var b bedrockBody
	if err := json.Unmarshal(body, &b); err != nil {
		return nil, fmt.Errorf("price: body: %w", err)
	}
	enc, err := s.Pricer.encoding(s.Pricer.AnthropicEncoding)
	if err != nil {
		return nil, err
	}
	var n int
	texts := textsOf(b.System)
	for _, m := range b.Messages {
		texts = append(texts, textsOf(m.Content)...)
	}
	for _, t := range texts {
		n += len(enc.Encode(t, nil, nil)) + 3
	}
	p := &Price{Provider: "bedrock", Model: model, N: 1,
		Prompt: int64(math.Ceil(float64(n+10) * max(s.Pricer.anthropicFactor(), 1)))}
	switch {
	case b.InferenceConfig.MaxTokens != nil:
		p.Output = *b.InferenceConfig.MaxTokens
	case b.MaxTokens != nil:
		p.Output = *b.MaxTokens
	default:
		p.Output = s.Pricer.DefaultOutput
	}
	return p, nil
}

// throttled answers Bedrock's ThrottlingException.
func bedrockError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("x-amzn-ErrorType", typ+":http://internal.amazon.com/coral/com.amazon.bedrock/")
	writeJSON(w, status, map[string]any{"message": msg})
}

func (s *Server) bedrock(w http.ResponseWriter, r *http.Request) {
	arrived := s.Now()
	model, op, ok := bedrockOp(r.URL.EscapedPath())
	api := map[string]string{"converse": "converse", "invoke-with-response-stream": "invoke_model_stream"}[op]
	if !ok || api == "" {
		bedrockError(w, http.StatusNotFound, "UnknownOperationException", "Unknown operation "+r.URL.Path)
		return
	}
	rec := &Record{Provider: "bedrock", API: api, Model: model, RequestID: r.Header.Get("x-request-id"), T: unix(arrived),
		FailureModeAllowed: r.Header.Get("x-envoy-auth-failure-mode-allowed"), Stream: op != "converse"}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	var p *Price
	if err == nil {
		p, err = s.bedrockPrice(model, body)
	}
	if err != nil {
		rec.Status, rec.End = http.StatusBadRequest, rec.T
		s.Recorder.Add(rec)
		bedrockError(w, http.StatusBadRequest, "ValidationException", err.Error())
		return
	}
	reserved := p.Prompt + p.Output // input + max_tokens, at the start
	rec.Prompt, rec.Output, rec.Cost = p.Prompt, p.Output, reserved
	wait, fits := s.Bedrock.admit(model, reserved, arrived)
	if !fits || wait > 0 {
		rec.Status, rec.End, rec.TooLarge, rec.Which, rec.WaitMS = http.StatusTooManyRequests, rec.T, !fits, "tokens", wait.Milliseconds()
		s.Recorder.Add(rec)
		bedrockError(w, http.StatusTooManyRequests, "ThrottlingException", "Too many tokens, please wait before trying again.")
		return
	}
	rec.InFlight = s.Recorder.Start()
	rec.Status = http.StatusOK
	out := s.completion(p)
	counted := p.Prompt + out*burndown(model)
	rec.Usage, rec.OTPM = p.Prompt+out, out*burndown(model)
	defer func() {
		end := s.Now()
		s.Bedrock.settle(model, counted-reserved, end)
		rec.Cost = counted
		rec.End = unix(end)
		s.Recorder.Add(rec)
	}()
	w.Header().Set("x-amzn-RequestId", fmt.Sprintf("mock-%d", s.seq.Add(1)))
	stop := "max_tokens"
	if out < p.Output {
		stop = "end_turn"
	}
	if op == "converse" {
		if !pause(r, s.latencyOf(r)) {
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"output":     map[string]any{"message": map[string]any{"role": "assistant", "content": []any{map[string]any{"text": words(out)}}}},
			"stopReason": stop,
			"usage":      map[string]any{"inputTokens": p.Prompt, "outputTokens": out, "totalTokens": p.Prompt + out},
			"metrics":    map[string]any{"latencyMs": s.latencyOf(r).Milliseconds()},
		})
		return
	}
	w.Header().Set("content-type", "application/vnd.amazon.eventstream")
	w.Header().Set("x-amzn-bedrock-content-type", "application/json")
	w.WriteHeader(http.StatusOK)
	every := s.latencyOf(r) / time.Duration(out+4)
	send := func(ev map[string]any) bool {
		b, _ := json.Marshal(ev)
		payload, _ := json.Marshal(map[string]any{"bytes": base64.StdEncoding.EncodeToString(b), "p": "abcdefghij"[:1+len(b)%10]})
		w.Write(eventMessage(payload, ":event-type", "chunk", ":content-type", "application/json", ":message-type", "event")) //nolint:errcheck // the client may have gone
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		return pause(r, every)
	}
	steps := []map[string]any{
		{"type": "message_start", "message": map[string]any{"id": "msg_bdrk_mock", "type": "message", "role": "assistant", "model": model,
			"content": []any{}, "stop_reason": nil, "usage": map[string]any{"input_tokens": p.Prompt, "output_tokens": 1}}},
		{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}},
	}
	for k := int64(0); k < out; k++ {
		steps = append(steps, map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": " mock"}})
	}
	steps = append(steps,
		map[string]any{"type": "content_block_stop", "index": 0},
		map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": out}},
		map[string]any{"type": "message_stop", "amazon-bedrock-invocationMetrics": map[string]any{"inputTokenCount": p.Prompt,
			"outputTokenCount": out, "invocationLatency": s.latencyOf(r).Milliseconds(), "firstByteLatency": every.Milliseconds()}})
	for _, ev := range steps {
		if !send(ev) {
			return
		}
	}
}

// eventMessage encodes one message of the AWS event stream encoding with string headers: the
// prelude (total length, headers length, the prelude's CRC32), the headers (name length, name,
// type 7, a 2-byte value length, value), the payload and the CRC32 of all before it
// (docs.aws.amazon.com/transcribe/latest/dg/streaming-setting-up.html#streaming-event-stream;
// CRC32 is the IEEE one, "GZIP CRC32").
func eventMessage(payload []byte, kv ...string) []byte {
	var h []byte
	for i := 0; i+1 < len(kv); i += 2 {
		h = append(h, byte(len(kv[i])))
		h = append(h, kv[i]...)
		h = append(h, 7)
		h = binary.BigEndian.AppendUint16(h, uint16(len(kv[i+1])))
		h = append(h, kv[i+1]...)
	}
	m := binary.BigEndian.AppendUint32(nil, uint32(16+len(h)+len(payload)))
	m = binary.BigEndian.AppendUint32(m, uint32(len(h)))
	m = binary.BigEndian.AppendUint32(m, crc32.ChecksumIEEE(m))
	m = append(append(m, h...), payload...)
	return binary.BigEndian.AppendUint32(m, crc32.ChecksumIEEE(m))
}
