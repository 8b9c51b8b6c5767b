package provider

import "testing"

func TestHostsLookup(t *testing.T) {
	t.Parallel()
	mistral := &Declared{Name: "mistral", Family: OpenAI}
	vllm := &Declared{Name: "vllm", Family: OpenAI}
	inner := &Declared{Name: "inner", Family: Anthropic}
	var h Hosts
	for _, a := range []struct {
		host string
		d    *Declared
		want bool
	}{
		{"api.mistral.ai", mistral, true},
		{"*.llm.example.com", vllm, true},
		{"*.eu.llm.example.com", inner, true},
		{"api.mistral.ai", vllm, false}, // already declared: unchanged
		{"*.llm.example.com", inner, false},
	} {
		if got := h.Add(a.host, a.d); got != a.want {
			t.Errorf("Add(%q) = %v, want %v", a.host, got, a.want)
		}
	}
	if h.Len() != 3 {
		t.Errorf("Len = %d, want 3", h.Len())
	}
	for host, want := range map[string]*Declared{
		"api.mistral.ai":             mistral,
		"API.Mistral.AI":             mistral,
		"mistral.ai":                 nil,
		"x.api.mistral.ai":           nil, // an exact name covers no name under it
		"a.llm.example.com":          vllm,
		"A.B.LLM.example.com":        vllm,
		"llm.example.com":            nil, // a wildcard needs a label of its own
		".llm.example.com":           nil,
		"gpu1.eu.llm.example.com":    inner, // the longest wildcard wins
		"eu.llm.example.com":         vllm,
		"":                           nil,
		"api.mistral.ai.evil.com":    nil,
		"evilapi.mistral.ai":         nil,
		"a.llm.example.com.evil.com": nil,
	} {
		if got := h.Lookup(host); got != want {
			t.Errorf("Lookup(%q) = %v, want %v", host, got, want)
		}
	}
	var none *Hosts
	if none.Lookup("api.mistral.ai") != nil || none.Len() != 0 {
		t.Error("a nil table holds a host")
	}
	long := make([]byte, MaxHostLen+1)
	for i := range long {
		long[i] = 'a'
	}
	if h.Lookup(string(long)) != nil {
		t.Error("a name over MaxHostLen was found")
	}
}

// Looking a host up is on every request's path: it allocates nothing, whatever its case.
func TestHostsLookupAllocatesNothing(t *testing.T) {
	var h Hosts
	h.Add("api.mistral.ai", &Declared{Name: "mistral"})
	h.Add("*.llm.example.com", &Declared{Name: "vllm"})
	n := testing.AllocsPerRun(100, func() {
		_ = h.Lookup("API.Mistral.ai")
		_ = h.Lookup("gpu-7.llm.example.com")
		_ = h.Lookup("api.openai.com")
	})
	if n != 0 {
		t.Errorf("%v allocations, want 0", n)
	}
}

func BenchmarkHostsLookup(b *testing.B) {
	var h Hosts
	h.Add("api.mistral.ai", &Declared{Name: "mistral"})
	h.Add("*.llm.example.com", &Declared{Name: "vllm"})
	b.ReportAllocs()
	for b.Loop() {
		h.Lookup("gpu-7.llm.example.com")
	}
}
