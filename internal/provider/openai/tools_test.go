package openai

import (
	"strings"
	"sync"
	"testing"

	reference "github.com/pkoukk/tiktoken-go"
	loader "github.com/pkoukk/tiktoken-go-loader"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/pricing"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tiktoken"
)

// The cookbook's counts are computed here independently of the pricer: from Go values, with
// pkoukk/tiktoken-go as the tokenizer (the one the cookbook lists for Go).

// oracles loads tiktoken-go's two encodings once, from its offline loader (it would download
// the vocabularies otherwise).
var oracles = sync.OnceValues(func() (map[string]*reference.Tiktoken, error) {
	reference.SetBpeLoader(loader.NewOfflineLoader())
	m := map[string]*reference.Tiktoken{}
	for _, name := range []string{"cl100k_base", "o200k_base"} {
		enc, err := reference.GetEncoding(name)
		if err != nil {
			return nil, err
		}
		m[name] = enc
	}
	return m, nil
})

// oracleCount counts text as tiktoken-go does in model's encoding.
func oracleCount(tb testing.TB, model, text string) int64 {
	tb.Helper()
	encs, err := oracles()
	if err != nil {
		tb.Fatal(err)
	}
	name := "cl100k_base"
	if strings.HasPrefix(model, "gpt-4o") {
		name = "o200k_base"
	}
	return int64(len(encs[name].EncodeOrdinary(text)))
}

// refMessages is num_tokens_from_messages: 3 per message, its string values, 1 per name, 3
// to prime the reply.
func refMessages(tb testing.TB, model string, msgs []map[string]string) int64 {
	tb.Helper()
	n := int64(3)
	for _, m := range msgs {
		n += 3
		for k, v := range m {
			n += oracleCount(tb, model, v)
			if k == "name" {
				n++
			}
		}
	}
	return n
}

type refProp struct {
	Type        string   `json:"type"`
	Description string   `json:"description"`
	Enum        []string `json:"enum,omitempty"`
}

type refParams struct {
	Type       string             `json:"type"`
	Properties map[string]refProp `json:"properties"`
	Required   []string           `json:"required,omitempty"`
}

type refFunc struct {
	Name        string    `json:"name"`
	Description string    `json:"description"`
	Parameters  refParams `json:"parameters"`
}

// refTools is num_tokens_for_tools without the messages, from the constants the cookbook
// publishes.
func refTools(tb testing.TB, model string, fs []refFunc) int64 {
	tb.Helper()
	if len(fs) == 0 {
		return 0
	}
	init := int64(10)
	if strings.HasPrefix(model, "gpt-4o") {
		init = 7
	}
	n := int64(12)
	for _, f := range fs {
		n += init + oracleCount(tb, model, f.Name+":"+strings.TrimSuffix(f.Description, "."))
		if len(f.Parameters.Properties) == 0 {
			continue
		}
		n += 3
		for k, p := range f.Parameters.Properties {
			n += 3
			if p.Enum != nil {
				n -= 3
				for _, e := range p.Enum {
					n += 3 + oracleCount(tb, model, e)
				}
			}
			n += oracleCount(tb, model, k+":"+p.Type+":"+strings.TrimSuffix(p.Description, "."))
		}
	}
	return n
}

func wrap(fs []refFunc) []map[string]any {
	ts := make([]map[string]any, len(fs))
	for i, f := range fs {
		ts[i] = map[string]any{"type": "function", "function": f}
	}
	return ts
}

var (
	weather = refFunc{
		Name:        "get_current_weather",
		Description: "Get the current weather in a given location",
		Parameters: refParams{Type: "object", Required: []string{"location"}, Properties: map[string]refProp{
			"location": {Type: "string", Description: "The city and state, e.g. San Francisco, CA"},
			"unit":     {Type: "string", Description: "The unit of temperature to return", Enum: []string{"celsius", "fahrenheit"}},
		}},
	}
	forecast = refFunc{
		Name:        "get_n_day_weather_forecast",
		Description: "Get an N-day weather forecast. Use it when the user asks about the coming days.",
		Parameters: refParams{Type: "object", Required: []string{"location", "num_days"}, Properties: map[string]refProp{
			"location": {Type: "string", Description: "The city and state, e.g. \"San Francisco, CA\"."},
			"format":   {Type: "string", Description: "The temperature unit.\nInfer it from the user's location.", Enum: []string{"celsius", "fahrenheit", "kelvin"}},
			"num_days": {Type: "integer", Description: "The number of days to forecast: 1 to 16."},
		}},
	}
	search = refFunc{
		Name:        "search_orders",
		Description: "Recherche les commandes d'un client — état, date, montant…", //nolint:misspell // French, on purpose: non-ASCII text
		Parameters: refParams{Type: "object", Properties: map[string]refProp{
			"status": {Type: "string", Description: "Order status", Enum: []string{"open", "shipped", "cancelled", "returned"}},
			"since":  {Type: "string", Description: "ISO 8601 date; orders on or after it"},
			"limit":  {Type: "number", Description: ""},
			"exact":  {Type: "boolean", Description: "Match the query exactly."},
		}},
	}
	noArgs = refFunc{
		Name:        "list_warehouses",
		Description: "List every warehouse.",
		Parameters:  refParams{Type: "object", Properties: map[string]refProp{}},
	}
	weatherMessages = []map[string]string{
		{"role": "system", "content": "You are a helpful assistant that can answer to questions about the weather."},
		{"role": "user", "content": "What's the weather like in San Francisco?"},
	}
)

// TestToolsRule: requests whose tool definitions have the shapes the cookbook's rule reads are
// priced exactly as it counts them, in every model it gives constants for.
func TestToolsRule(t *testing.T) {
	t.Parallel()
	models := []string{"gpt-4o", "gpt-4o-mini", "gpt-4o-2024-08-06", "gpt-4", "gpt-4-0613", "gpt-3.5-turbo", "gpt-3.5-turbo-0125"}
	for _, tc := range []struct {
		name   string
		msgs   []map[string]string
		fs     []refFunc
		legacy bool // sent as "functions"
	}{
		{"one function", weatherMessages, []refFunc{weather}, false},
		{"several functions", weatherMessages, []refFunc{weather, forecast, search, noArgs}, false},
		{"descriptions with dots, quotes, newlines and non-ASCII", []map[string]string{
			{"role": "user", "content": "Où en est ma commande ?"},
		}, []refFunc{search, forecast}, false},
		{"no properties", weatherMessages, []refFunc{noArgs}, false},
		{"legacy functions", weatherMessages, []refFunc{weather, forecast}, true},
		{"tool result message and names", []map[string]string{
			{"role": "system", "name": "ops", "content": "Answer from tool results."},
			{"role": "user", "content": "Weather in Paris?"},
			{"role": "tool", "tool_call_id": "call_abc123", "content": `{"temperature": 12, "unit": "celsius"}`},
		}, []refFunc{weather, forecast}, false},
	} {
		for _, model := range models {
			body := map[string]any{"model": model, "messages": tc.msgs, "max_tokens": 50}
			if tc.legacy {
				body["functions"] = tc.fs
			} else {
				body["tools"] = wrap(tc.fs)
			}
			want := refMessages(t, model, tc.msgs) + refTools(t, model, tc.fs)
			got := price(t, provider.ChatCompletions, model, mustJSON(t, body))
			if got.PromptTokens != want || got.Reason != "" {
				t.Errorf("%s, %s: prompt %d (%q), want %d exact", tc.name, model, got.PromptTokens, got.Reason, want)
			}
		}
	}
}

// TestToolsRuleCounts pins a few of the counts TestToolsRule derives, so that the reference
// itself cannot drift unseen.
func TestToolsRuleCounts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		model string
		fs    []refFunc
		want  int64
	}{
		{"gpt-4o", []refFunc{weather}, 101},
		{"gpt-4", []refFunc{weather}, 105},
		{"gpt-4o", []refFunc{weather, forecast, search, noArgs}, 296},
		{"gpt-4", []refFunc{weather, forecast, search, noArgs}, 314},
	} {
		want := refMessages(t, tc.model, weatherMessages) + refTools(t, tc.model, tc.fs)
		body := mustJSON(t, map[string]any{"model": tc.model, "messages": weatherMessages, "tools": wrap(tc.fs)})
		got := price(t, provider.ChatCompletions, tc.model, body)
		if want != tc.want || got.PromptTokens != tc.want {
			t.Errorf("%s, %d functions: reference %d, priced %d, want %d", tc.model, len(tc.fs), want, got.PromptTokens, tc.want)
		}
	}
}

// TestToolsUnknownShapes: definitions the cookbook's rule does not read, tool calls (it has no
// rule for them) and models it gives no constants for stay estimated (ReasonTools) and are
// priced at least as before: the messages, toolsOverhead and the definitions' JSON text, and
// 5 plus its JSON text per tool call (the definitions in the tool-call row are ones the rule
// covers, and are counted by it).
func TestToolsUnknownShapes(t *testing.T) {
	t.Parallel()
	nested := map[string]any{"type": "function", "function": map[string]any{
		"name": "create_order", "description": "Create an order.",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{
			"address": map[string]any{"type": "object", "description": "Where to ship.", "properties": map[string]any{
				"street": map[string]any{"type": "string", "description": "Street and number."},
				"city":   map[string]any{"type": "string", "description": "City."},
			}},
			"items": map[string]any{"type": "array", "description": "Order lines.", "items": map[string]any{"type": "string"}},
		}},
	}}
	noDesc := map[string]any{"type": "function", "function": map[string]any{
		"name": "ping", "parameters": map[string]any{"type": "object", "properties": map[string]any{}},
	}}
	strict := map[string]any{"type": "function", "function": map[string]any{
		"name": "get_current_weather", "description": "Get the weather.", "strict": true,
		"parameters": map[string]any{"type": "object", "additionalProperties": false, "required": []string{"location"},
			"properties": map[string]any{"location": map[string]any{"type": "string", "description": "City."}}},
	}}
	numericEnum := map[string]any{"type": "function", "function": map[string]any{
		"name": "set_level", "description": "Set the level.",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{
			"level": map[string]any{"type": "integer", "description": "Level.", "enum": []int{1, 2, 3}}}},
	}}
	typeList := map[string]any{"type": "function", "function": map[string]any{
		"name": "note", "description": "Take a note.",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{
			"text": map[string]any{"type": []string{"string", "null"}, "description": "Text."}}},
	}}
	plain := wrap([]refFunc{weather})
	calls := []map[string]any{
		{"id": "call_1", "type": "function", "function": map[string]any{"name": "get_current_weather", "arguments": `{"location":"Paris, France","unit":"celsius"}`}},
		{"id": "call_2", "type": "function", "function": map[string]any{"name": "get_current_weather", "arguments": `{"location":"Lyon, France"}`}},
		{"id": "call_3", "type": "function", "function": map[string]any{"name": "get_n_day_weather_forecast", "arguments": `{"location":"Nice, France","format":"celsius","num_days":3}`}},
	}
	for _, tc := range []struct {
		name, model string
		tools       []map[string]any
		calls       []map[string]any
	}{
		{"nested object and array properties", "gpt-4o", []map[string]any{nested}, nil},
		{"missing description", "gpt-4o", []map[string]any{noDesc}, nil},
		{"strict with additionalProperties", "gpt-4o-mini", []map[string]any{strict}, nil},
		{"numeric enum", "gpt-4", []map[string]any{numericEnum}, nil},
		{"type list", "gpt-3.5-turbo", []map[string]any{typeList}, nil},
		{"one bad among good", "gpt-4o", []map[string]any{plain[0], nested}, nil},
		{"model without constants", "gpt-4.1", plain, nil},
		{"snapshot without function calling", "gpt-4-0314", plain, nil},
		{"multiple tool calls", "gpt-4o", plain, calls},
	} {
		msgs := []any{weatherMessages[0], weatherMessages[1]}
		before := refMessages(t, tc.model, weatherMessages) + toolsOverhead + oracleCount(t, tc.model, mustJSON(t, tc.tools))
		if tc.calls != nil {
			before = refMessages(t, tc.model, weatherMessages) + refTools(t, tc.model, []refFunc{weather})
			msgs = append(msgs,
				map[string]any{"role": "assistant", "content": nil, "tool_calls": tc.calls},
				map[string]string{"role": "tool", "tool_call_id": "call_1", "content": "12C"})
			before += 3 + oracleCount(t, tc.model, "assistant") + refMessages(t, tc.model, []map[string]string{{"role": "tool", "tool_call_id": "call_1", "content": "12C"}}) - 3
			for _, c := range tc.calls {
				before += perToolCall + oracleCount(t, tc.model, mustJSON(t, c))
			}
		}
		body := mustJSON(t, map[string]any{"model": tc.model, "messages": msgs, "tools": tc.tools})
		got := price(t, provider.ChatCompletions, tc.model, body)
		if got.PromptTokens < before || got.Reason != pricing.ReasonTools {
			t.Errorf("%s, %s: prompt %d (%q), want at least %d (%q)", tc.name, tc.model, got.PromptTokens, got.Reason, before, pricing.ReasonTools)
		}
	}
}

func TestFuncInit(t *testing.T) {
	t.Parallel()
	for model, want := range map[string]int64{
		"gpt-4o": 7, "gpt-4o-mini": 7, "gpt-4o-2024-05-13": 7, "gpt-4o-mini-2024-07-18": 7,
		"gpt-4": 10, "gpt-4-0613": 10, "gpt-3.5-turbo": 10, "gpt-3.5-turbo-1106": 10,
		"gpt-4-0314": 0, "gpt-3.5-turbo-0301": 0, "gpt-4-turbo": 0, "gpt-4-1106-preview": 0,
		"gpt-4.1": 0, "gpt-4o-audio-preview": 0, "o3": 0, "gpt-5": 0, "": 0, "-0613": 0,
	} {
		got, ok := funcInit(model)
		if got != want || ok != (want != 0) {
			t.Errorf("funcInit(%q) = %d, %v, want %d", model, got, ok, want)
		}
	}
}

// FuzzChatTools: any chat body with tool definitions is priced without a panic, never
// negative, and counting each text by its length never gives less than tokenizing it.
func FuzzChatTools(f *testing.F) {
	cl100k := encoding(f, tiktoken.CL100K)
	cfg := pricing.Config{DefaultOutputTokens: 4096, CL100K: cl100k, O200K: encoding(f, tiktoken.O200K), Fallback: cl100k}
	var set Settings
	for _, fs := range [][]refFunc{{weather}, {forecast, search, noArgs}} {
		f.Add("gpt-4o", []byte(mustJSON(f, map[string]any{"messages": weatherMessages, "tools": wrap(fs)})))
		f.Add("gpt-4", []byte(mustJSON(f, map[string]any{"messages": weatherMessages, "functions": fs})))
	}
	f.Add("gpt-4o", []byte(`{"messages":[],"tools":[{"type":"function","function":{"name":"a\u0041","description":".","parameters":{"type":"object","properties":{"k\"":{"type":"string","description":"","enum":[]}}}}}]}`))
	f.Fuzz(func(t *testing.T, model string, body []byte) {
		priced := func(c pricing.Counting) pricing.Estimate {
			var sc pricing.Scratch
			r := pricing.NewRequest(&cfg, &sc, c)
			if r.Doc.Parse(body) != nil || r.Doc.Kind(0) != pricing.Object {
				return pricing.Estimate{PromptTokens: -1}
			}
			r.Est = pricing.Estimate{Provider: provider.OpenAI, API: provider.ChatCompletions, Model: model}
			Price(&r, 0, &set)
			return r.Est
		}
		est, byLen := priced(pricing.Tokenize), priced(pricing.ByLength)
		if est.PromptTokens == -1 {
			return // not a JSON object
		}
		if est.PromptTokens < 0 || est.OutputTokens < 0 || byLen.PromptTokens < est.PromptTokens {
			t.Fatalf("estimate %+v, by length %+v", est, byLen)
		}
	})
}
