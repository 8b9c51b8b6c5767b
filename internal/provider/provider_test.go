package provider

import "testing"

// Every API's name parses back to it, and any other name is UnknownAPI; likewise providers.
func TestParseNames(t *testing.T) {
	t.Parallel()
	for a := ChatCompletions; a <= StreamGenerateContent; a++ {
		if got := ParseAPI(a.String()); got != a {
			t.Errorf("ParseAPI(%q) = %v, want %v", a.String(), got, a)
		}
	}
	if got := ParseAPI("no_such_api"); got != UnknownAPI {
		t.Errorf("ParseAPI(no_such_api) = %v", got)
	}
	for p := OpenAI; p <= Vertex; p++ {
		if got := Parse(p.String()); got != p {
			t.Errorf("Parse(%q) = %v, want %v", p.String(), got, p)
		}
	}
}
