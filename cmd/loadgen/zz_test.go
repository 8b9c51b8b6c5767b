package main

import (
	"math/rand/v2"
	"testing"

	"github.com/llm-ratelimit/llm-ratelimit/internal/tokens"
)

func BenchmarkZZTurns(b *testing.B) {
	p, err := tokens.New(tokens.Options{})
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var ins []*tokens.Input
	for i := 0; i < 512; i++ {
		body, path := chatBody(rng, []string{"gpt-4o", "gpt-4o-mini", "gpt-4.1-mini", "claude-sonnet-4-5"}[i%4], 8192, i%64)
		ins = append(ins, &tokens.Input{Path: path, Body: body, ContentType: "application/json", ContentLength: int64(len(body))})
	}
	for _, in := range ins {
		p.Estimate(in)
	}
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		p.Estimate(ins[i%len(ins)])
		i++
	}
}
