package pricing

import (
	"strings"
	"testing"

	"github.com/llm-ratelimit/llm-ratelimit/internal/tiktoken"
)

func TestCountCacheSlots(t *testing.T) {
	if NewCache(0) != nil || NewCache(-1) != nil {
		t.Fatal("a cache of no entries is off")
	}
	c := NewCache(1000)
	if len(c.slots) != 1024 {
		t.Fatalf("%d slots, want 1024", len(c.slots))
	}
	text := []byte(strings.Repeat("cached text ", 30))
	idx, tag := c.key(text, tiktoken.O200K)
	if _, _, _, ok := c.get(idx, tag); ok {
		t.Fatal("hit in an empty cache")
	}
	c.put(idx, tag, 12345, true, false)
	if n, chunked, invalid, ok := c.get(idx, tag); !ok || n != 12345 || !chunked || invalid {
		t.Fatalf("got %d %v %v %v", n, chunked, invalid, ok)
	}
	// Another encoding's name is another key.
	if i2, t2 := c.key(text, tiktoken.CL100K); i2 == idx && t2 == tag {
		t.Fatal("two encodings gave one key")
	} else if _, _, _, ok := c.get(i2, t2); ok && i2 == idx {
		t.Fatal("hit across encodings")
	}
	c.put(idx, tag, cacheCountMask+1, false, false) // too large: not stored, the old entry stays
	if n, _, _, ok := c.get(idx, tag); !ok || n != 12345 {
		t.Fatalf("oversized count replaced the entry: %d %v", n, ok)
	}
}
