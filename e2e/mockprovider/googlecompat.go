package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// The two other dialects Google's hosts speak, under the mock's Gemini accounting (gemini.go):
//
//   - Claude on Vertex AI: POST /{version}/projects/{p}/locations/{l}/publishers/anthropic/
//     models/{model}:rawPredict answers an Anthropic Messages response, :streamRawPredict its
//     server-sent events. The body is a Messages request with an "anthropic_version" (the page
//     writes "vertex-2023-10-16"; the anthropic SDK's AnthropicVertex sends its own API
//     version, anthropic/lib/vertex/_client.py) and no "model", the model being in the path
//     (https://cloud.google.com/vertex-ai/generative-ai/docs/partner-models/claude). Vertex's
//     Claude quotas are per model, in requests and input tokens a minute (same page, "Quotas"):
//     the Gemini meters, keyed vertex/{model}, count them.
//   - The Gemini API's OpenAI-compatible endpoint: POST /{version}/openai/chat/completions
//     answers an OpenAI chat completion, streamed with a usage chunk when stream_options asks
//     for it (https://ai.google.dev/gemini-api/docs/openai). It counts against the model's
//     Gemini limits like generateContent, its messages counted as contents (system messages as
//     the system instruction).
//
// Over a limit both answer Google's google.rpc.Status 429, as Vertex AI and the Gemini API do
// for their quotas whatever the dialect of the body.

// vertexClaudeCall splits /.../publishers/anthropic/models/{model}:{method} with method
// rawPredict or streamRawPredict; ok is false for any other path.
func vertexClaudeCall(p string) (model string, stream, ok bool) {
	const pub = "/publishers/anthropic/models/"
	i := strings.LastIndex(p, pub)
	if i < 0 {
		return "", false, false
	}
	model, method, found := strings.Cut(p[i+len(pub):], ":")
	if !found || model == "" || strings.Contains(model, "/") {
		return "", false, false
	}
	if m, err := url.PathUnescape(model); err == nil {
		model = m
	}
	switch method {
	case "rawPredict":
		return model, false, true
	case "streamRawPredict":
		return model, true, true
	}
	return "", false, false
}

// geminiCompatPath reports whether p is the Gemini API's OpenAI-compatible chat endpoint.
func geminiCompatPath(p string) bool {
	v, ok := strings.CutSuffix(p, "/openai/chat/completions")
	return ok && strings.Count(v, "/") == 1 && strings.HasPrefix(v, "/v")
}

// vertexClaude serves one rawPredict or streamRawPredict request to model.
func (s *Server) vertexClaude(w http.ResponseWriter, r *http.Request, model string, stream bool) {
	now := s.Now()
	api := "messages"
	rec := &Record{T: unix(now), Provider: "vertex", API: api, Model: model, Stream: stream,
		RequestID: r.Header.Get("x-request-id"), FailureModeAllowed: r.Header.Get("x-envoy-auth-failure-mode-allowed")}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	var fields map[string]json.RawMessage
	if err == nil {
		err = json.Unmarshal(body, &fields)
	}
	if err == nil {
		var v string
		_ = json.Unmarshal(fields["anthropic_version"], &v) // absent or not a string: ""
		switch {
		case v == "":
			err = fmt.Errorf("anthropic_version: Field required")
		case fields["model"] != nil:
			err = fmt.Errorf("model: Extra inputs are not permitted")
		}
	}
	var p *Price
	if err == nil {
		// Priced as the Messages request it is, the model named by the path.
		fields["model"], _ = json.Marshal(model)
		b, _ := json.Marshal(fields)
		p, err = s.Pricer.PriceOn("api.anthropic.com", "/v1/messages", b)
	}
	if err != nil {
		rec.Status, rec.End = http.StatusBadRequest, unix(s.Now())
		s.Recorder.Add(rec)
		pause(r, s.ErrorLatency)
		s.errorAnswer(w, true, http.StatusBadRequest, "invalid_request_error", "", err.Error())
		return
	}
	p.Stream = stream
	rec.Prompt, rec.Output, rec.Cost, rec.Input = p.Prompt, p.Output, p.Prompt, p.Prompt
	if !s.geminiAdmit(w, rec, "vertex/"+model, p.Prompt) {
		return
	}
	out := s.completion(p)
	rec.Status, rec.Usage = http.StatusOK, p.Prompt+out
	rec.InFlight = s.Recorder.Start()
	defer func() {
		rec.End = unix(s.Now())
		s.Recorder.Add(rec)
	}()
	s.messages(w, r, p, s.seq.Add(1))
}

// geminiCompat serves one chat completion on the Gemini API's OpenAI-compatible endpoint.
func (s *Server) geminiCompat(w http.ResponseWriter, r *http.Request) {
	now := s.Now()
	rec := &Record{T: unix(now), Provider: "gemini", API: "chat_completions", Key: apiKey(r),
		RequestID: r.Header.Get("x-request-id"), FailureModeAllowed: r.Header.Get("x-envoy-auth-failure-mode-allowed")}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	var p *Price
	if err == nil {
		p, err = s.Pricer.PriceOn("", "/v1/chat/completions", body)
	}
	var chat request
	if err == nil {
		err = json.Unmarshal(body, &chat)
	}
	var in int64
	if err == nil {
		var g geminiRequest
		for _, m := range chat.Messages {
			c := geminiContent{Role: m.Role}
			for _, t := range m.Content {
				c.Parts = append(c.Parts, struct {
					Text string `json:"text"`
				}{t})
			}
			if m.Role == "system" {
				g.SystemInstruction = &c
				continue
			}
			g.Contents = append(g.Contents, c)
		}
		in, _, err = s.Gemini.prompt(s.Pricer, &g)
	}
	if err != nil {
		rec.Status, rec.End = http.StatusBadRequest, unix(s.Now())
		s.Recorder.Add(rec)
		pause(r, s.ErrorLatency)
		s.errorAnswer(w, false, http.StatusBadRequest, "", "invalid_request_error", err.Error())
		return
	}
	p.Prompt, p.N = in, 1
	rec.Model, rec.Stream, rec.Prompt, rec.Output, rec.Cost, rec.Input = p.Model, p.Stream, in, p.Output, in, in
	if !s.geminiAdmit(w, rec, "gemini/"+p.Model, in) {
		return
	}
	rec.Status, rec.Usage = http.StatusOK, in+s.completion(p)
	rec.InFlight = s.Recorder.Start()
	defer func() {
		rec.End = unix(s.Now())
		s.Recorder.Add(rec)
	}()
	s.chat(w, r, p, s.seq.Add(1))
}

// geminiAdmit counts input tokens to key's Gemini meters, or records rec as refused, answers
// Google's 429 and returns false.
func (s *Server) geminiAdmit(w http.ResponseWriter, rec *Record, key string, input int64) bool {
	v := s.Gemini.Admit(key, input, s.Now())
	if v.ok {
		return true
	}
	rec.Status, rec.Which, rec.TooLarge, rec.WaitMS, rec.End = http.StatusTooManyRequests, v.which, v.never, v.wait.Milliseconds(), unix(s.Now())
	s.Recorder.Add(rec)
	geminiError(w, http.StatusTooManyRequests, "RESOURCE_EXHAUSTED",
		"Resource exhausted. Please try again later. Please refer to https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more details.")
	return false
}
