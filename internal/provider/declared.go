package provider

import "strings"

// Declared is a provider the limits file declares (its providers section): an OpenAI- or
// Anthropic-compatible API on hosts of its own (api.mistral.ai, a self-hosted vLLM), known by its
// name and priced, read and answered in the dialect of a built-in family. A request of a declared
// provider carries the family as its ID and the Declared beside it (pricing.Estimate.Name).
// It is immutable once built and safe for concurrent use.
type Declared struct {
	// Name is the provider in rules, accounting, bucket keys, metrics and logs: [a-z0-9_-], no
	// built-in provider's name.
	Name string
	// Family is the built-in provider whose dialect it speaks: OpenAI or Anthropic.
	Family ID
	// Encoding is the encoding every text of its requests is counted in (tiktoken's name);
	// "" when Ratio is set or the dialect chooses (OpenAI's: the model's, else the fallback;
	// Anthropic's: cl100k_base and its estimate).
	Encoding string
	// Ratio, when positive, makes its prompts an estimate: their cl100k_base count times Ratio.
	Ratio float64
}

// MaxHostLen is the longest host name a table holds (DNS: 253 characters).
const MaxHostLen = 253

// Hosts finds the declared provider of a host: exact names and *.example.com wildcards, ASCII
// case ignored. Build it with Add before it is shared; afterwards it is read only and safe for
// concurrent use. A nil *Hosts holds no host.
type Hosts struct {
	exact map[string]*Declared // lower-case names
	wild  map[string]*Declared // ".example.com" for *.example.com
}

// Add declares host (a lower-case name, or *. and one) for d. It reports false, and changes
// nothing, when the table holds that host already. Not safe for concurrent use.
func (t *Hosts) Add(host string, d *Declared) bool {
	m := &t.exact
	if rest, ok := strings.CutPrefix(host, "*"); ok {
		m, host = &t.wild, rest
	}
	if *m == nil {
		*m = map[string]*Declared{}
	}
	if _, dup := (*m)[host]; dup {
		return false
	}
	(*m)[host] = d
	return true
}

// Len is the number of hosts the table holds.
func (t *Hosts) Len() int {
	if t == nil {
		return 0
	}
	return len(t.exact) + len(t.wild)
}

// Lookup is the declared provider of h (a HostName: no port, no final dot; any case), nil when
// none: an exact name first, then the longest wildcard whose suffix h ends with after a label of
// its own (*.example.com holds a.example.com and a.b.example.com, not example.com). It allocates
// nothing.
func (t *Hosts) Lookup(h string) *Declared {
	if t.Len() == 0 || len(h) == 0 || len(h) > MaxHostLen {
		return nil
	}
	var buf [MaxHostLen]byte
	b := buf[:len(h)]
	for i := 0; i < len(h); i++ {
		c := h[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b[i] = c
	}
	if d, ok := t.exact[string(b)]; ok {
		return d
	}
	if len(t.wild) == 0 {
		return nil
	}
	for i := 1; i < len(b); i++ {
		if b[i] == '.' {
			if d, ok := t.wild[string(b[i:])]; ok {
				return d
			}
		}
	}
	return nil
}
