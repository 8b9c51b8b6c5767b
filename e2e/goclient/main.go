// Command goclient is the Go side of the end-to-end load: workers calling through Envoy with the
// official OpenAI (github.com/openai/openai-go/v3) or Anthropic (anthropic-sdk-go/v2) SDK, with
// the SDKs' own retries, until a deadline. Like an application, it reaches the providers through
// Envoy as an HTTP proxy (http://api.openai.com, http://api.anthropic.com).
//
// It writes a JSON summary: calls made per prompt, how each call ended (success, a clean rate-limit
// error after the SDK's retries, request too large, or anything else with samples), and the
// time span of the load. The suite prices the prompts through the mock to turn the counts into
// offered tokens.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "goclient:", err)
		os.Exit(1)
	}
}

// Prompt is one entry of e2e/prompts.json.
type Prompt struct {
	System *string `json:"system"`
	User   string  `json:"user"`
}

// Summary is what the client writes when it ends.
type Summary struct {
	Client       string         `json:"client"`
	Provider     string         `json:"provider"`
	Model        string         `json:"model"`
	Key          string         `json:"key"`
	MaxTokens    int64          `json:"max_tokens"`
	Workers      int            `json:"workers"`
	Started      float64        `json:"started"`
	Ended        float64        `json:"ended"`
	Calls        int64          `json:"calls"`
	OK           int64          `json:"ok"`
	RateLimited  int64          `json:"rate_limited"`
	TooLarge     int64          `json:"too_large"`
	Errors       int64          `json:"errors"`
	ErrorSamples []string       `json:"error_samples"`
	CallsBy      map[string]int `json:"calls_by_prompt"`
	OKBy         map[string]int `json:"ok_by_prompt"`
	// Streamed counts the successful streamed calls.
	Streamed int64 `json:"streamed"`
	// StreamUsage counts streamed calls whose final event carried the usage.
	StreamUsage int64 `json:"stream_usage"`
}

type options struct {
	proxy, provider, model, key, tenant, priority, source, promptsPath, out, name string
	workers, streamEvery, maxRetries                                              int
	maxTokens                                                                     int64
	duration, timeout, pace, ramp                                                 time.Duration
	startAt, startOffset                                                          float64
	ready, startFile                                                              string
	offset                                                                        int
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o options
	fs := flag.NewFlagSet("goclient", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.proxy, "proxy", "", "Envoy's listener as an HTTP proxy (http://127.0.0.1:10000)")
	fs.StringVar(&o.provider, "provider", "openai", "openai or anthropic")
	fs.StringVar(&o.model, "model", "gpt-4o-mini", "model to call")
	fs.StringVar(&o.key, "key", "sk-e2e", "API key (the mock records it: name the client in it)")
	fs.StringVar(&o.source, "source", "", "local address to connect from, e.g. 127.0.0.12 (the shipped envoy.yaml names the tenant by it)")
	fs.StringVar(&o.tenant, "tenant", "", "x-tenant-id header to send (empty: none; the shipped envoy.yaml removes it)")
	fs.StringVar(&o.priority, "priority", "", "x-llm-priority header to send (empty: none; the shipped envoy.yaml removes it)")
	fs.StringVar(&o.promptsPath, "prompts", "e2e/prompts.json", "prompts file")
	fs.StringVar(&o.out, "out", "", "write the JSON summary here (default: stdout)")
	fs.StringVar(&o.name, "name", "goclient", "client name in the summary")
	fs.IntVar(&o.workers, "workers", 4, "concurrent workers")
	fs.IntVar(&o.streamEvery, "stream-every", 3, "every n-th call of a worker streams (0: never)")
	fs.IntVar(&o.maxRetries, "max-retries", 2, "the SDK's retries (its default is 2)")
	fs.IntVar(&o.offset, "offset", 0, "first prompt index of worker 0")
	fs.Int64Var(&o.maxTokens, "max-tokens", 200, "max_tokens of every call")
	fs.DurationVar(&o.duration, "duration", 60*time.Second, "start no call after this long")
	fs.DurationVar(&o.timeout, "timeout", 60*time.Second, "per-call timeout, retries included")
	fs.DurationVar(&o.pace, "pace", 0, "time between the starts of a worker's calls (0: back to back)")
	fs.DurationVar(&o.ramp, "ramp", 0, "each worker starts after a random delay up to this")
	fs.Float64Var(&o.startAt, "start-at", 0, "Unix time to start at (0: now), to start processes together")
	fs.StringVar(&o.ready, "ready", "", "create this file once the client is built (before waiting to start)")
	fs.StringVar(&o.startFile, "start-file", "", "wait (up to 5 minutes) for this file, which holds a Unix time, and start -start-offset seconds after it (instead of -start-at)")
	fs.Float64Var(&o.startOffset, "start-offset", 0, "with -start-file: seconds after its time to start at (negative: before)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.proxy == "" {
		return errors.New("-proxy is required")
	}
	proxyURL, err := url.Parse(o.proxy)
	if err != nil {
		return fmt.Errorf("-proxy: %w", err)
	}
	raw, err := os.ReadFile(o.promptsPath)
	if err != nil {
		return err
	}
	var pf struct{ Prompts []Prompt }
	if err := json.Unmarshal(raw, &pf); err != nil || len(pf.Prompts) == 0 {
		return fmt.Errorf("%s: no prompts (%v)", o.promptsPath, err)
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	if o.source != "" {
		ip := net.ParseIP(o.source)
		if ip == nil {
			return fmt.Errorf("-source %q is not an IP address", o.source)
		}
		dialer.LocalAddr = &net.TCPAddr{IP: ip}
	}
	hc := &http.Client{Transport: &http.Transport{
		Proxy:               http.ProxyURL(proxyURL),
		DialContext:         dialer.DialContext,
		MaxIdleConnsPerHost: o.workers,
	}}
	var call func(ctx context.Context, p Prompt, stream bool) (usage bool, err error)
	switch o.provider {
	case "openai":
		call = openaiCaller(hc, &o)
	case "anthropic":
		call = anthropicCaller(hc, &o)
	default:
		return fmt.Errorf("-provider %q is not openai or anthropic", o.provider)
	}

	if o.ready != "" {
		if err := os.WriteFile(o.ready, nil, 0o644); err != nil {
			return err
		}
	}
	if o.startFile != "" {
		at, err := awaitStart(ctx, o.startFile)
		if err != nil {
			return err
		}
		o.startAt = at + o.startOffset
	}
	if o.startAt > 0 {
		wait := time.Until(time.Unix(0, int64(o.startAt*1e9)))
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s := &Summary{Client: o.name, Provider: o.provider, Model: o.model, Key: o.key, MaxTokens: o.maxTokens,
		Workers: o.workers, CallsBy: map[string]int{}, OKBy: map[string]int{}, ErrorSamples: []string{}}
	start := time.Now()
	s.Started = float64(start.UnixNano()) / 1e9
	deadline := start.Add(o.duration)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < o.workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			if o.ramp > 0 {
				select {
				case <-time.After(rand.N(o.ramp)):
				case <-ctx.Done():
				}
			}
			for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
				tCall := time.Now()
				idx := (o.offset + w*5 + i) % len(pf.Prompts)
				stream := o.streamEvery > 0 && i%o.streamEvery == o.streamEvery-1
				cctx, cancel := context.WithTimeout(ctx, o.timeout)
				usage, err := call(cctx, pf.Prompts[idx], stream)
				cancel()
				key := fmt.Sprint(idx)
				mu.Lock()
				s.Calls++
				s.CallsBy[key]++
				if stream && err == nil {
					s.Streamed++
					if usage {
						s.StreamUsage++
					}
				}
				switch status := statusOf(err); {
				case err == nil:
					s.OK++
					s.OKBy[key]++
				case status == http.StatusTooManyRequests:
					s.RateLimited++
				case status == http.StatusRequestEntityTooLarge:
					s.TooLarge++
				default:
					s.Errors++
					if len(s.ErrorSamples) < 10 {
						s.ErrorSamples = append(s.ErrorSamples, err.Error())
					}
				}
				mu.Unlock()
				if o.pace > 0 {
					select {
					case <-time.After(time.Until(tCall.Add(o.pace))):
					case <-ctx.Done():
					}
				}
			}
		}(w)
	}
	wg.Wait()
	s.Ended = float64(time.Now().UnixNano()) / 1e9
	b, err := json.MarshalIndent(s, "", " ")
	if err != nil {
		return err
	}
	if o.out == "" {
		_, err = stdout.Write(append(b, '\n'))
		return err
	}
	return os.WriteFile(o.out, b, 0o644)
}

// statusOf returns the HTTP status of an SDK error (0 when it is not an API error).
func statusOf(err error) int {
	var oe *openai.Error
	if errors.As(err, &oe) {
		return oe.StatusCode
	}
	var ae *anthropic.Error
	if errors.As(err, &ae) {
		return ae.StatusCode
	}
	return 0
}

func openaiCaller(hc *http.Client, o *options) func(context.Context, Prompt, bool) (bool, error) {
	opts := []ooption.RequestOption{
		ooption.WithAPIKey(o.key),
		ooption.WithBaseURL("http://api.openai.com/v1/"),
		ooption.WithHTTPClient(hc),
		ooption.WithMaxRetries(o.maxRetries),
	}
	if o.tenant != "" {
		opts = append(opts, ooption.WithHeader("x-tenant-id", o.tenant))
	}
	if o.priority != "" {
		opts = append(opts, ooption.WithHeader("x-llm-priority", o.priority))
	}
	client := openai.NewClient(opts...)
	return func(ctx context.Context, p Prompt, stream bool) (bool, error) {
		var msgs []openai.ChatCompletionMessageParamUnion
		if p.System != nil {
			msgs = append(msgs, openai.SystemMessage(*p.System))
		}
		msgs = append(msgs, openai.UserMessage(p.User))
		params := openai.ChatCompletionNewParams{
			Model:               openai.ChatModel(o.model),
			Messages:            msgs,
			MaxCompletionTokens: openai.Int(o.maxTokens),
		}
		if !stream {
			_, err := client.Chat.Completions.New(ctx, params)
			return false, err
		}
		params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		st := client.Chat.Completions.NewStreaming(ctx, params)
		defer st.Close()
		usage := false
		for st.Next() {
			if st.Current().Usage.PromptTokens > 0 {
				usage = true
			}
		}
		return usage, st.Err()
	}
}

func anthropicCaller(hc *http.Client, o *options) func(context.Context, Prompt, bool) (bool, error) {
	opts := []aoption.RequestOption{
		aoption.WithAPIKey(o.key),
		aoption.WithBaseURL("http://api.anthropic.com/"),
		aoption.WithHTTPClient(hc),
		aoption.WithMaxRetries(o.maxRetries),
	}
	if o.tenant != "" {
		opts = append(opts, aoption.WithHeader("x-tenant-id", o.tenant))
	}
	if o.priority != "" {
		opts = append(opts, aoption.WithHeader("x-llm-priority", o.priority))
	}
	client := anthropic.NewClient(opts...)
	return func(ctx context.Context, p Prompt, stream bool) (bool, error) {
		params := anthropic.MessageNewParams{
			Model:     anthropic.Model(o.model),
			MaxTokens: o.maxTokens,
			Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(p.User))},
		}
		if p.System != nil {
			params.System = []anthropic.TextBlockParam{{Text: *p.System}}
		}
		if !stream {
			_, err := client.Messages.New(ctx, params)
			return false, err
		}
		st := client.Messages.NewStreaming(ctx, params)
		defer st.Close()
		usage := false
		for st.Next() {
			if ev := st.Current(); ev.Type == "message_delta" && ev.Usage.OutputTokens > 0 {
				usage = true
			}
		}
		return usage, st.Err()
	}
}

// awaitStart waits, up to 5 minutes, for the file that holds the Unix time to start at.
func awaitStart(ctx context.Context, path string) (float64, error) {
	give := time.After(5 * time.Minute)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if b, err := os.ReadFile(path); err == nil {
			at, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
			if err != nil {
				return 0, fmt.Errorf("start file %s: %w", path, err)
			}
			return at, nil
		}
		select {
		case <-tick.C:
		case <-give:
			return 0, fmt.Errorf("no start file %s after 5 minutes", path)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}
