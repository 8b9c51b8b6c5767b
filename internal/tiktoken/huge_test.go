package tiktoken

import (
	"runtime"
	"testing"
)

// TestHugeBytes: the table memory is zeroed, writable and of the asked length, whether it is
// mapped (large) or from the heap (small), and a mapping can be freed.
func TestHugeBytes(t *testing.T) {
	for _, n := range []int{100, 3<<20 + 5} {
		b, free := hugeBytes(n)
		if len(b) != n || cap(b) != n {
			t.Fatalf("hugeBytes(%d): len %d, cap %d", n, len(b), cap(b))
		}
		for i := range b {
			if b[i] != 0 {
				t.Fatalf("hugeBytes(%d): byte %d is %#x", n, i, b[i])
			}
			b[i] = byte(i)
		}
		if runtime.GOOS == "linux" && n >= 2<<20 {
			if free == nil {
				t.Fatalf("hugeBytes(%d): not mapped", n)
			}
			if p := uintptr(unsafePointer(b)); p%(2<<20) != 0 {
				t.Fatalf("hugeBytes(%d) at %#x: not aligned to a huge page", n, p)
			}
		}
		if free != nil {
			free()
		}
	}
}
