package tokens

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/openai"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/pricing"
)

func utf16LEBytes(s string, bom bool) []byte {
	var b []byte
	if bom {
		b = append(b, 0xFF, 0xFE)
	}
	for _, u := range utf16.Encode([]rune(s)) {
		b = binary.LittleEndian.AppendUint16(b, u)
	}
	return b
}

func utf16BEBytes(s string) []byte {
	var b []byte
	for _, u := range utf16.Encode([]rune(s)) {
		b = binary.BigEndian.AppendUint16(b, u)
	}
	return b
}

func utf32LEBytes(s string) []byte {
	b := []byte{0xFF, 0xFE, 0, 0}
	for _, r := range s {
		b = binary.LittleEndian.AppendUint32(b, uint32(r))
	}
	return b
}

// deepSchema is a tool whose parameters nest depth objects, as a recursive JSON schema does.
func deepSchema(depth int) string {
	return `[{"type":"function","function":{"name":"f","parameters":` +
		strings.Repeat(`{"type":"object","properties":{"max_tokens":`, depth) + `{"type":"integer"}` +
		strings.Repeat(`}}`, depth) + `}}]`
}

// Bodies the providers' parsers read (Python's json.loads) are read here too, field by field:
// the max_tokens they name is reserved, not a default.
func TestProviderParserLeniency(t *testing.T) {
	t.Parallel()
	p := newPricer(t, Options{})
	const chat = `{"model":"gpt-4o","messages":[{"role":"user","content":"Hello"}],"max_tokens":16000}`
	plain := p.Estimate(post("/v1/chat/completions", chat))
	if !plain.Exact || plain.OutputTokens != 16000 {
		t.Fatalf("plain body: %+v", plain)
	}
	in := func(b []byte) *Input {
		return &Input{Path: "/v1/chat/completions", Body: b, ContentLength: int64(len(b))}
	}
	tests := []struct {
		name string
		in   *Input
	}{
		{"UTF-8 BOM", in(append([]byte{0xEF, 0xBB, 0xBF}, chat...))},
		{"UTF-16LE with BOM", in(utf16LEBytes(chat, true))},
		{"UTF-16LE without BOM", in(utf16LEBytes(chat, false))},
		{"UTF-16BE without BOM", in(utf16BEBytes(chat))},
		{"UTF-32LE with BOM", in(utf32LEBytes(chat))},
		{"NaN and Infinity", post("/v1/chat/completions", strings.Replace(chat, `"max_tokens"`, `"temperature":NaN,"top_p":-Infinity,"seed":Infinity,"max_tokens"`, 1))},
	}
	for _, tt := range tests {
		got := p.Estimate(tt.in)
		if got.PromptTokens != plain.PromptTokens || got.OutputTokens != 16000 || got.Reason != "" {
			t.Errorf("%s: got %+v, want the plain reading %+v", tt.name, got, plain)
		}
	}
	// A 70-level tool schema is legal to the providers: read, its tools priced as JSON text.
	deep := `{"model":"gpt-4o","messages":[{"role":"user","content":"Hello"}],"tools":` + deepSchema(70) + `,"max_tokens":16000}`
	if got := p.Estimate(post("/v1/chat/completions", deep)); got.OutputTokens != 16000 || got.Reason != ReasonTools {
		t.Errorf("70-level schema: %+v", got)
	}
	// Keys are case-sensitive, as in Python: MAX_TOKENS is not max_tokens.
	if got := p.Estimate(post("/v1/chat/completions", `{"model":"gpt-4o","messages":[],"MAX_TOKENS":1}`)); got.OutputTokens != DefaultOutputTokens {
		t.Errorf("MAX_TOKENS read as max_tokens: %+v", got)
	}
}

// TestUpperBounds: a body that cannot be read in full is priced at the documented bound, never
// at the default output; each row would have got DefaultOutputTokens (4096) or a count scaled
// from its prefix before the bound.
func TestUpperBounds(t *testing.T) {
	t.Parallel()
	p := newPricer(t, Options{OpenAI: openai.Settings{AzureDeployments: map[string]string{"prod": "gpt-4o-mini"}}})
	mib := 1 << 20
	prefix := `{"model":"gpt-4o","max_tokens":10,"messages":[{"role":"user","content":"`
	cut := func(n int) []byte { // the first n bytes of a body that goes on
		return []byte(prefix + strings.Repeat("a", n-len(prefix)))
	}
	deep := `{"model":"gpt-4o","max_tokens":20000,"n":2,"messages":` + strings.Repeat("[", pricing.MaxDepth+1) + strings.Repeat("]", pricing.MaxDepth+1) + `}`
	tests := []struct {
		name string
		in   *Input
		want Estimate
	}{
		{"deeper than the parser: scanned max_tokens times n, one token per byte",
			post("/v1/chat/completions", deep),
			Estimate{Provider: OpenAI, API: ChatCompletions, Model: "gpt-4o", PromptTokens: int64(len(deep)), OutputTokens: 40000, Reason: ReasonNotJSON}},
		{"partial with content-length: the model's maximum output, even when a smaller one is seen",
			&Input{Path: "/v1/chat/completions", Body: cut(mib), ContentLength: 3 * int64(mib), Partial: true},
			Estimate{Provider: OpenAI, API: ChatCompletions, Model: "gpt-4o", PromptTokens: 128_000, OutputTokens: 16_384, Reason: ReasonPartialBody}},
		{"partial, a larger max_tokens seen than the model's maximum",
			&Input{Path: "/v1/chat/completions", Body: []byte(`{"model":"gpt-4o","max_tokens":90000,"messages":[`), ContentLength: 2000, Partial: true},
			Estimate{Provider: OpenAI, API: ChatCompletions, Model: "gpt-4o", PromptTokens: 2000, OutputTokens: 90000, Reason: ReasonPartialBody}},
		{"exactly max_request_bytes without content-length: Envoy says complete, it may not be",
			&Input{Path: "/v1/chat/completions", Body: cut(mib), ContentLength: int64(mib), NoContentLength: true},
			Estimate{Provider: OpenAI, API: ChatCompletions, Model: "gpt-4o", PromptTokens: 128_000, OutputTokens: 16_384, Reason: ReasonPartialBody}},
		{"chunked, partial: size unknown, the whole context window (not twice the prefix)",
			&Input{Path: "/v1/chat/completions", Body: cut(mib), ContentLength: int64(mib) + 100, Partial: true, NoContentLength: true},
			Estimate{Provider: OpenAI, API: ChatCompletions, Model: "gpt-4o", PromptTokens: 128_000, OutputTokens: 16_384, Reason: ReasonPartialBody}},
		{"without content-length, below the buffer: complete",
			&Input{Path: "/v1/chat/completions", Body: []byte(`{"model":"gpt-4o","max_tokens":10,"messages":[]}`), ContentLength: 48, NoContentLength: true},
			Estimate{Provider: OpenAI, API: ChatCompletions, Model: "gpt-4o", PromptTokens: 3, OutputTokens: 10, Exact: true}},
		{"unknown model, partial: the provider's largest maximum output",
			&Input{Path: "/v1/chat/completions", Body: []byte(`{"model":"mystery","messages":[`), ContentLength: 5000, Partial: true},
			Estimate{Provider: OpenAI, API: ChatCompletions, Model: "mystery", PromptTokens: 5000, OutputTokens: openAIMaxOutput, Reason: ReasonPartialBody}},
		{"Anthropic, partial",
			&Input{Path: "/v1/messages", Body: []byte(`{"model":"claude-haiku-4-5","max_tokens":5,"messages":[`), ContentLength: 900_000, Partial: true},
			Estimate{Provider: Anthropic, API: Messages, Model: "claude-haiku-4-5", PromptTokens: 200_000, OutputTokens: 64_000, Reason: ReasonPartialBody}},
		{"Azure deployment, partial: the deployment's model",
			&Input{Path: "/openai/deployments/prod/chat/completions?api-version=1", Body: []byte(`{"messages":[`), ContentLength: 300_000, Partial: true},
			Estimate{Provider: AzureOpenAI, API: ChatCompletions, Model: "gpt-4o-mini", PromptTokens: 128_000, OutputTokens: 16_384, Reason: ReasonPartialBody}},
		{"embeddings, partial: no output",
			&Input{Path: "/v1/embeddings", Body: []byte(`{"model":"text-embedding-3-small","input":"`), ContentLength: 50_000, Partial: true},
			Estimate{Provider: OpenAI, API: Embeddings, Model: "text-embedding-3-small", PromptTokens: 8_192, Reason: ReasonPartialBody}},
		{"bogus content-encoding on a plain body: its plain reading",
			&Input{Path: "/v1/chat/completions", ContentEncoding: "bogus", ContentLength: -1,
				Body: []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"Hello"}],"max_tokens":16000}`)},
			Estimate{Provider: OpenAI, API: ChatCompletions, Model: "gpt-4o", PromptTokens: 3 + 1 + 1 + 3, OutputTokens: 16000, Reason: ReasonUnsupportedEncoding}},
		{"gzip header on a plain body: its plain reading",
			&Input{Path: "/v1/chat/completions", ContentEncoding: "gzip", ContentLength: -1,
				Body: []byte(`{"model":"gpt-4o","messages":[],"max_tokens":16000}`)},
			Estimate{Provider: OpenAI, API: ChatCompletions, Model: "gpt-4o", PromptTokens: 3, OutputTokens: 16000, Reason: ReasonGzip}},
		{"UTF-16 partial: 1.5 tokens per byte",
			&Input{Path: "/v1/chat/completions", Body: utf16LEBytes(`{"model":"gpt-4o","messages":[`, true), ContentLength: 10_000, Partial: true},
			Estimate{Provider: OpenAI, API: ChatCompletions, Model: "gpt-4o", PromptTokens: 15_000, OutputTokens: 16_384, Reason: ReasonPartialBody}},
	}
	for _, tt := range tests {
		got := p.Estimate(tt.in)
		got.Chars, got.OutputUnset, got.Context = 0, false, 0 // TestAccountingInputs
		if got != tt.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tt.name, got, tt.want)
		}
	}
}

func TestUnreadablePolicies(t *testing.T) {
	t.Parallel()
	in := &Input{Path: "/v1/chat/completions", Body: []byte(`{"model":"mystery","messages":[`), ContentLength: 5000, Partial: true}
	if got := newPricer(t, Options{UnreadableOutputTokens: 7000}).Estimate(in); got.OutputTokens != 7000 {
		t.Errorf("UnreadableOutputTokens: %+v", got)
	}
	got := newPricer(t, Options{RefuseUnreadable: true}).Estimate(in)
	if got.OutputTokens != refuseTokens {
		t.Errorf("RefuseUnreadable: %+v", got)
	}
	limits := []ModelLimits{{Model: "mystery", Context: 3000, Output: 900}}
	if got := newPricer(t, Options{ModelLimits: limits}).Estimate(in); got.PromptTokens != 3000 || got.OutputTokens != 900 {
		t.Errorf("ModelLimits: %+v", got)
	}
	if _, err := New(Options{ModelLimits: []ModelLimits{{Model: "[", Context: 0}}, UnseenContextTokens: -1}); err == nil {
		t.Error("bad limits accepted")
	}
}

// TestUnseenContext: input the body refers to but does not show is reserved at the bound.
func TestUnseenContext(t *testing.T) {
	t.Parallel()
	p := newPricer(t, Options{})
	small := newPricer(t, Options{UnseenContextTokens: 5000})
	resp := func(extra string) *Input {
		return post("/v1/responses", `{"model":"gpt-4o","input":"Hi","max_output_tokens":10`+extra+`}`)
	}
	chat := func(part string) *Input {
		return post("/v1/chat/completions", `{"model":"gpt-4o","max_tokens":10,"messages":[{"role":"user","content":[`+part+`]}]}`)
	}
	msgs := func(extra, content string) *Input {
		return post("/v1/messages", `{"model":"claude-haiku-4-5","max_tokens":10`+extra+`,"messages":[{"role":"user","content":`+content+`}]}`)
	}
	tests := []struct {
		name   string
		in     *Input
		reason Reason
		window int64
	}{
		{"previous_response_id", resp(`,"previous_response_id":"resp_1"`), ReasonPreviousResponse, 128_000},
		{"conversation", resp(`,"conversation":"conv_1"`), ReasonConversation, 128_000},
		{"conversation object", resp(`,"conversation":{"id":"conv_1"}`), ReasonConversation, 128_000},
		{"stored prompt", resp(`,"prompt":{"id":"pmpt_1","version":"2"}`), ReasonStoredPrompt, 128_000},
		{"mcp tool", resp(`,"tools":[{"type":"mcp","server_label":"x","server_url":"https://x"}]`), ReasonMCPServers, 128_000},
		{"file_search", resp(`,"tools":[{"type":"file_search","vector_store_ids":["vs_1"]}]`), ReasonFileInput, 128_000},
		{"item_reference", post("/v1/responses", `{"model":"gpt-4o","input":[{"type":"item_reference","id":"msg_1"}],"max_output_tokens":10}`), ReasonItemReference, 128_000},
		{"input_file", post("/v1/responses", `{"model":"gpt-4o","input":[{"role":"user","content":[{"type":"input_file","file_id":"file-1"}]}],"max_output_tokens":10}`), ReasonFileInput, 128_000},
		{"chat file part", chat(`{"type":"file","file":{"file_id":"file-1"}}`), ReasonFileInput, 128_000},
		{"anthropic mcp_servers", msgs(`,"mcp_servers":[{"type":"url","url":"https://x","name":"x"}]`, `"Hi"`), ReasonMCPServers, 200_000},
		{"anthropic document URL", msgs("", `[{"type":"document","source":{"type":"url","url":"https://x/a.pdf"}}]`), ReasonDocumentURL, 200_000},
		{"anthropic file", msgs("", `[{"type":"document","source":{"type":"file","file_id":"file_1"}}]`), ReasonFileInput, 200_000},
		{"anthropic PDF", msgs("", `[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0="}}]`), ReasonFileInput, 200_000},
		{"anthropic container_upload", msgs("", `[{"type":"container_upload","file_id":"file_1"}]`), ReasonContainerUpload, 200_000},
	}
	for _, tt := range tests {
		got := p.Estimate(tt.in)
		if got.Reason != tt.reason || got.PromptTokens != tt.window || got.OutputTokens != 10 {
			t.Errorf("%s: got %+v, want reason %s and the window %d", tt.name, got, tt.reason, tt.window)
		}
		g := small.Estimate(tt.in)
		if g.Reason != tt.reason || g.PromptTokens < 5000 || g.PromptTokens > 5000+200 {
			t.Errorf("%s with UnseenContextTokens 5000: got %+v", tt.name, g)
		}
	}
	// Seen context is not reserved at the bound.
	for _, in := range []*Input{resp(`,"previous_response_id":""`), resp(`,"conversation":null`),
		msgs(`,"mcp_servers":[]`, `[{"type":"document","source":{"type":"text","media_type":"text/plain","data":"abc"}}]`)} {
		if got := p.Estimate(in); got.PromptTokens > 1000 {
			t.Errorf("%s: reserved at the bound: %+v", in.Body, got)
		}
	}
}

func TestScanTop(t *testing.T) {
	t.Parallel()
	tests := []struct {
		body  string
		out   int64
		n     int64
		model string
	}{
		{`{"max_tokens":5}`, 5, 0, ""},
		{`{"max_tokens":5,"max_tokens":7}`, 7, 0, ""},                // last wins
		{`{"max_tokens":9,"max_tokens":"x"}`, -1, 0, ""},             // the last one is not a number
		{`{"max_tokens":5,"max_completion_tokens":300}`, 300, 0, ""}, // the largest key
		{`{"x":"\"max_tokens\":99","max_tokens":5}`, 5, 0, ""},       // inside a string
		{`{"x":"\\","max_tokens":5}`, 5, 0, ""},                      // an escaped backslash closes
		{`{"tools":[{"max_tokens":99}],"max_tokens":5}`, 5, 0, ""},   // nested
		{`{"model":"gpt-4o","n":3,"best_of":5,"max_output_tokens":1e3}`, 1000, 5, "gpt-4o"},
		{`{"n":1e9}`, -1, pricing.MaxChoices, ""},
		{`{"max_tokens" : 12 , "model" : "m"`, 12, 0, "m"},                                 // cut short
		{`{"max_tokens":5,"messages":[{"content":"` + strings.Repeat(`\"`, 100), 5, 0, ""}, // unterminated string
		{`[{"max_tokens":5}]`, -1, 0, ""},
		{`{"max\u005ftokens":5}`, -1, 0, ""}, // escaped keys are not recognised: the bound applies
		{``, -1, 0, ""},
	}
	for _, tt := range tests {
		sc := scanTop([]byte(tt.body))
		if sc.output != tt.out || sc.n != tt.n || string(sc.model) != tt.model {
			t.Errorf("%s: got %d, n %d, model %q; want %d, %d, %q", tt.body, sc.output, sc.n, sc.model, tt.out, tt.n, tt.model)
		}
	}
}

// FuzzScanTop holds the scan to the parser: on a body the parser reads whole and that has no
// escapes, the scan finds exactly the output maxima, n and model the parser reads.
func FuzzScanTop(f *testing.F) {
	for _, s := range []string{`{"max_tokens":5,"max_tokens":7,"n":2}`, `{"a":{"max_tokens":1},"max_completion_tokens":3}`,
		`{"model":"gpt-4o","x":"max_tokens","max_output_tokens":1.0}`, `{"max_tokens":[1]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		start := time.Now()
		sc := scanTop(b)
		if d := time.Since(start); d > time.Second {
			t.Fatalf("scan took %v for %d bytes", d, len(b))
		}
		var d pricing.Doc
		if bytes.IndexByte(b, '\\') >= 0 || d.Parse(b) != nil || d.Kind(0) != pricing.Object {
			return
		}
		want := int64(-1)
		for _, k := range outputKeys {
			if v, ok := d.Int(d.Get(0, k)); ok {
				want = max(want, v)
			}
		}
		if sc.output != want {
			t.Fatalf("%q: scan %d, parser %d", b, sc.output, want)
		}
		count := func(k string) int64 {
			if v, ok := d.Int(d.Get(0, k)); ok && v > 0 {
				return v
			}
			return 0
		}
		if n := min(max(count("n"), count("best_of")), pricing.MaxChoices); sc.n != n {
			t.Fatalf("%q: scan n %d, parser %d", b, sc.n, n)
		}
		if m, ok := d.Text(nil, d.Get(0, "model")); ok && len(m) <= 256 && string(m) != string(sc.model) {
			t.Fatalf("%q: scan model %q, parser %q", b, sc.model, m)
		}
	})
}

func TestDetectCharset(t *testing.T) {
	t.Parallel()
	tests := []struct {
		b   []byte
		cs  charset
		bom int
	}{
		{[]byte("{}"), utf8Text, 0},
		{[]byte{0xEF, 0xBB, 0xBF, '{'}, utf8Text, 3},
		{[]byte{0xFF, 0xFE, '{', 0}, utf16LE, 2},
		{[]byte{0xFE, 0xFF, 0, '{'}, utf16BE, 2},
		{[]byte{0xFF, 0xFE, 0, 0, '{', 0, 0, 0}, utf32LE, 4},
		{[]byte{0, 0, 0xFE, 0xFF}, utf32BE, 4},
		{[]byte{'{', 0, '}', 0}, utf16LE, 0},
		{[]byte{0, '{', 0, '}'}, utf16BE, 0},
		{[]byte{'{', 0, 0, 0}, utf32LE, 0},
		{[]byte{0, 0, 0, '{'}, utf32BE, 0},
		{[]byte{'{', 0}, utf16LE, 0},
		{[]byte{0, '{'}, utf16BE, 0},
	}
	for _, tt := range tests {
		if cs, bom := detectCharset(tt.b); cs != tt.cs || bom != tt.bom {
			t.Errorf("% x: got %d, %d; want %d, %d", tt.b, cs, bom, tt.cs, tt.bom)
		}
	}
	// Hostile UTF-16: lone surrogates, an odd trailing byte; bounded output.
	b := []byte{0xFF, 0xFE, 0x00, 0xD8, 'a', 0, 0x00, 0xDC, 'x'}
	text, _ := asUTF8(b, nil)
	if string(text) != "\uFFFDa\uFFFD" {
		t.Errorf("lone surrogates: %q", text)
	}
}

// boundSeeds are FuzzEstimate's seeds for the bounds.
func boundSeeds() []struct{ path, body string } {
	return []struct{ path, body string }{
		{"/v1/chat/completions", "\xEF\xBB\xBF" + `{"model":"gpt-4o","messages":[],"max_tokens":NaN}`},
		{"/v1/chat/completions", string(utf16LEBytes(`{"model":"gpt-4o","messages":[{"role":"user","content":"\ud800"}]}`, false))},
		{"/v1/responses", `{"model":"gpt-4o","previous_response_id":"r","input":[{"type":"item_reference"}],"tools":[{"type":"mcp"}]}`},
		{"/v1/messages", `{"model":"claude-3-5-haiku","mcp_servers":[1],"messages":[{"role":"user","content":[{"type":"document","source":{"type":"url"}}]}]}`},
		{"/v1/chat/completions", `{"model":"gpt-4o","max_tokens":-Infinity,"n":Infinity,` + strings.Repeat("[", pricing.MaxDepth+1)},
	}
}

// Each hostile 1 MiB body of the kinds above prices in at most 60 ms (the minimum of three runs,
// so that a busy machine's pause is not counted; ten times that under the race detector).
func TestHostileBodiesPriceFast(t *testing.T) {
	p := newPricer(t, Options{})
	mib := 1 << 20
	prose := mustJSON(t, string(englishProse(t, mib-300)))
	prose = prose[1 : len(prose)-1]
	chatOf := func(content string) string {
		return `{"model":"gpt-4o","max_tokens":16000,"messages":[{"role":"user","content":"` + content + `"}]}`
	}
	deep := `{"model":"gpt-4o","max_tokens":16000,"messages":` + strings.Repeat("[", mib/2) + strings.Repeat("]", mib/2) + `}`
	schema := deepSchema(70)
	schema = schema[1 : len(schema)-1] // one tool
	manyKeys := `{"model":"gpt-4o",` + strings.Repeat(`"max_tokens":1,`, mib/15) + `"max_tokens":16000,"messages":[]}`
	quotes := chatOf(strings.Repeat(`\"\\`, mib/4))
	bodies := map[string]*Input{
		"BOM and prose":               post("/v1/chat/completions", "\xEF\xBB\xBF"+chatOf(prose)),
		"UTF-16 prose":                {Path: "/v1/chat/completions", Body: utf16LEBytes(chatOf(prose[:mib/2-100]), true), ContentLength: -1},
		"nested half a million deep":  post("/v1/chat/completions", deep),
		"70-level schemas to 1 MiB":   post("/v1/chat/completions", `{"model":"gpt-4o","max_tokens":16000,"messages":[],"tools":[`+strings.Repeat(schema+",", mib/len(schema)-1)+schema+`]}`),
		"a MiB of max_tokens keys":    post("/v1/chat/completions", manyKeys),
		"quotes and backslashes":      post("/v1/chat/completions", quotes),
		"exactly 1 MiB, no length":    {Path: "/v1/chat/completions", Body: []byte(chatOf(prose))[:mib], NoContentLength: true, ContentLength: int64(mib)},
		"bogus encoding and prose":    {Path: "/v1/chat/completions", Body: []byte(chatOf(prose)), ContentEncoding: "bogus", ContentLength: -1},
		"unterminated string of NaNs": post("/v1/chat/completions", `{"model":"gpt-4o","max_tokens":NaN,"x":"`+strings.Repeat("NaN", mib/3)),
	}
	limit := 60 * time.Millisecond
	if raceEnabled {
		limit *= 10
	}
	for name, in := range bodies {
		best := time.Hour
		var est Estimate
		for range 3 {
			start := time.Now()
			est = p.Estimate(in)
			best = min(best, time.Since(start))
		}
		t.Logf("%-28s %7d bytes  %8v  %+v", name, len(in.Body), best, est)
		if best > limit {
			t.Errorf("%s: %v, above %v", name, best, limit)
		}
		if est.Cost() < 16000 {
			t.Errorf("%s: cost %d below the max_tokens it names", name, est.Cost())
		}
	}
}
