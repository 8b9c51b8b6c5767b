package openai

import (
	"testing"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/pricing"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tiktoken"
)

// BenchmarkChat prices chat bodies as tokens.Pricer does, one Scratch reused: without tools,
// with definitions the tool rule covers, and with ones it does not (nested schemas).
func BenchmarkChat(b *testing.B) {
	msgs := `"messages":[{"role":"system","content":"You are a helpful assistant that can answer to questions about the weather."},{"role":"user","content":"What's the weather like in San Francisco?"}]`
	fn := `{"type":"function","function":{"name":"get_current_weather","description":"Get the current weather in a given location","parameters":{"type":"object","properties":{"location":{"type":"string","description":"The city and state, e.g. San Francisco, CA"},"unit":{"type":"string","description":"The unit of temperature to return","enum":["celsius","fahrenheit"]}},"required":["location"]}}}`
	nested := `{"type":"function","function":{"name":"create_order","description":"Create an order.","parameters":{"type":"object","properties":{"address":{"type":"object","properties":{"city":{"type":"string"}}}}}}}`
	cl100k := encoding(b, tiktoken.CL100K)
	cfg := pricing.Config{DefaultOutputTokens: 4096, CL100K: cl100k, O200K: encoding(b, tiktoken.O200K), Fallback: cl100k}
	var set Settings
	for _, bc := range []struct{ name, body string }{
		{"no-tools", `{"model":"gpt-4o",` + msgs + `}`},
		{"tools-rule", `{"model":"gpt-4o",` + msgs + `,"tools":[` + fn + `,` + fn + `,` + fn + `]}`},
		{"tools-estimated", `{"model":"gpt-4o",` + msgs + `,"tools":[` + fn + `,` + nested + `]}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			body := []byte(bc.body)
			var sc pricing.Scratch
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				r := pricing.NewRequest(&cfg, &sc, pricing.Tokenize)
				if err := r.Doc.Parse(body); err != nil {
					b.Fatal(err)
				}
				r.Est = pricing.Estimate{Provider: provider.OpenAI, API: provider.ChatCompletions, Model: "gpt-4o"}
				Price(&r, 0, &set)
			}
		})
	}
}
