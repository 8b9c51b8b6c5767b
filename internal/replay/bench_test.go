package replay

import (
	"bytes"
	"testing"
	"time"

	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
)

// BenchmarkReplay replays 10 minutes of generated traffic at 100 requests a second (60,000
// decisions and their settlements) per op; decisions/s is the figure docs/performance.md quotes.
func BenchmarkReplay(b *testing.B) {
	b.ReportAllocs()
	var log bytes.Buffer
	n, err := Generate(&log, Traffic{Start: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Duration: 10 * time.Minute, RPS: 100, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	c, err := config.Load("testdata/bench.yaml")
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		e, err := New(Options{Config: c})
		if err != nil {
			b.Fatal(err)
		}
		if err := e.Read(bytes.NewReader(log.Bytes()), "generated"); err != nil {
			b.Fatal(err)
		}
		if rep := e.Finish(); rep.Decisions != n {
			b.Fatalf("replayed %d of %d", rep.Decisions, n)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}
