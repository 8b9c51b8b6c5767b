package redistest

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// fatalRecorder is a testing.TB whose Fatal records the message and stops the goroutine.
type fatalRecorder struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// TestMissingBinaryFails checks that a machine without redis-server fails the test with the fix,
// instead of skipping it.
func TestMissingBinaryFails(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	f := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		StartServer(f)
		t.Error("StartServer returned without redis-server on the PATH")
	}()
	<-done
	if !strings.Contains(f.msg, "redis-server not found: run make deps") {
		t.Fatalf("failure message %q, want it to name redis-server and make deps", f.msg)
	}
}
