package server

import (
	"reflect"
	"testing"

	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/reconcile"
)

func TestSettlementOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file string
		want reconcile.Settlement
	}{
		{"rules: []\n", reconcile.DefaultSettlement()},
		{"settlement: {keep_on_client_error: 0, usage_factor: 2, max_usage_tokens: 5000, decode: [gzip, zstd]}\n",
			reconcile.Settlement{UsageFactor: 2, MaxUsage: 5000, Decode: reconcile.Gzip | reconcile.Zstd}},
		{"settlement: {decode: []}\n", reconcile.Settlement{KeepOnClientError: 0.25, UsageFactor: 8, MaxUsage: 2_000_000}},
		// A declared provider's responses are read in its dialect: the settlement knows its family.
		{"providers:\n- {name: mistral, hosts: [api.mistral.ai], dialect: openai}\n- {name: kimi, hosts: [api.moonshot.ai], dialect: anthropic}\n",
			func() reconcile.Settlement {
				s := reconcile.DefaultSettlement()
				s.Declared = map[string]provider.ID{"mistral": provider.OpenAI, "kimi": provider.Anthropic}
				return s
			}()},
	} {
		c, err := config.Parse([]byte(tc.file), "t")
		if err != nil {
			t.Fatal(err)
		}
		got, err := SettlementOf(c)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q: %+v %v, want %+v", tc.file, got, err, tc.want)
		}
	}
}
