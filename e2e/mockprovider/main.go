// Command mockprovider is an OpenAI-, Azure OpenAI- and Anthropic-compatible LLM API for the
// end-to-end suite and the compose stack. It enforces its own per-minute limits like a provider (token_bucket or
// rolling_window), prices requests independently of the project's counter (tiktoken-go, prompt +
// max_tokens), answers 429 with the provider's own headers and error body when over, and records
// every request it answers as a JSON line so that tests can compute what it admitted per time
// window and how many requests it served at once.
//
//	mockprovider [flags]             serve
//	mockprovider probe URL           exit 0 when URL answers 200 (container health checks)
//
// Endpoints: POST /v1/chat/completions (stream: true with a usage chunk), /v1/completions,
// /v1/responses, /v1/embeddings, /v1/messages (Anthropic, streaming too), and on Anthropic's host
// /v1/chat/completions (its OpenAI-compatible endpoint, under Anthropic's limits), Azure OpenAI's
// /openai/deployments/{deployment}/{chat/completions,completions,embeddings} (under Azure's
// accounting: -azure-tpm, -azure-rpm, -azure-rpm-window; azure.go), and on the Amazon Bedrock
// runtime's hosts /model/{modelId}/converse and /invoke-with-response-stream, on the Gemini API's
// and Vertex AI's hosts models/{model}:generateContent and :streamGenerateContent (under Google's
// accounting: -gemini-tpm, -gemini-rpm, -gemini-rpd; gemini.go), Claude on Vertex AI's
// publishers/anthropic/models/{model}:rawPredict and :streamRawPredict and the Gemini API's
// /v1beta/openai/chat/completions under the same accounting (googlecompat.go), and GET and POST /gemini/clock
// (the clock of its requests per day); GET /v1/models,
// /healthz, /stats, /ledger (what each API key was billed, in micro-dollars: ledger.go); POST /price/<path> answers the price of a request without admitting it. Replies
// are compressed in a coding the client accepts (br, zstd, gzip, deflate; -compress=false: never),
// as the providers' APIs do; with -done-linger D a chat completion stream stays open D after its
// data: [DONE]; a request with x-mock-usage-tokens: N is answered with a reported
// usage of N tokens (an upstream reporting more than it used) and charged what it used. It must never
// be exposed beyond a test network: it has no authentication.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	_ "time/tzdata" // America/Los_Angeles for Gemini's requests per day, in any image
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mockprovider:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "probe" {
		if len(args) != 2 {
			return errors.New("usage: mockprovider probe URL")
		}
		return probe(ctx, args[1])
	}
	fs := flag.NewFlagSet("mockprovider", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "plain HTTP listen address")
	tlsAddr := fs.String("tls-addr", "", "HTTPS listen address (empty: none); needs -tls-dir")
	tlsDir := fs.String("tls-dir", "", "directory holding (or receiving) ca.pem and ca.key of a private CA that signs the HTTPS certificate")
	tlsCAOut := fs.String("tls-ca-out", "", "also write the CA certificate (public part only) to this file, for clients to trust")
	tlsHosts := fs.String("tls-hosts", "api.openai.com,api.anthropic.com,your-resource-name.openai.azure.com,bedrock-runtime.us-east-1.amazonaws.com,generativelanguage.googleapis.com,us-central1-aiplatform.googleapis.com", "comma-separated DNS names of the HTTPS certificate (envoy/envoy.yaml's upstreams)")
	modeName := fs.String("mode", string(TokenBucket), "limit enforcement: token_bucket or rolling_window")
	period := fs.Duration("period", time.Minute, "the limits' period (the window of rolling_window)")
	openaiTPM := fs.Int64("openai-tpm", 60000, "OpenAI tokens per period per model (0: unlimited)")
	openaiRPM := fs.Int64("openai-rpm", 0, "OpenAI requests per period per model (0: unlimited)")
	anthropicTPM := fs.Int64("anthropic-tpm", 40000, "Anthropic tokens per period per model (0: unlimited)")
	anthropicRPM := fs.Int64("anthropic-rpm", 0, "Anthropic requests per period per model (0: unlimited)")
	anthropicITPM := fs.Int64("anthropic-itpm", 0, "Anthropic input tokens per period per model; with -anthropic-otpm, Messages requests are admitted by Anthropic's accounting (RPM, ITPM, OTPM, prompt caching) instead of -anthropic-tpm (0 and 0: off)")
	anthropicOTPM := fs.Int64("anthropic-otpm", 0, "Anthropic output tokens per period per model (see -anthropic-itpm)")
	cacheMin := fs.Int64("anthropic-cache-min", 1024, "shortest cacheable prompt prefix in tokens")
	cacheTTL := fs.Duration("anthropic-cache-ttl", 5*time.Minute, "life of a cached prefix, refreshed on each read")
	geminiTPM := fs.Int64("gemini-tpm", 0, "Gemini API / Vertex AI input tokens per period per model (0: unlimited)")
	geminiRPM := fs.Int64("gemini-rpm", 0, "Gemini API / Vertex AI requests per period per model (0: unlimited)")
	geminiRPD := fs.Int64("gemini-rpd", 0, "Gemini API / Vertex AI requests per Pacific day per model (0: unlimited)")
	geminiFactor := fs.Float64("gemini-factor", 1, "Gemini prompt tokens per cl100k_base token")
	geminiCached := fs.Int64("gemini-cached-tokens", 1024, "input tokens a Gemini request's cachedContent brings")
	geminiClock := fs.String("gemini-clock", "", "RFC 3339 time the Gemini quota clock reads at start (empty: the mock's clock); POST /gemini/clock moves it later")
	bedrockTPM := fs.Int64("bedrock-tpm", 0, "Amazon Bedrock runtime tokens per period per model id, counted with its output burndown (0: unlimited)")
	spendCap := fs.Int64("anthropic-spend-cap", 0, "with Anthropic's accounting: refuse every request once this many tokens were admitted, with a 429 without retry-after (0: no cap)")
	azureTPM := fs.Int64("azure-tpm", 0, "Azure OpenAI tokens per minute per deployment, a count of the requests' estimates reset each minute (0: unlimited)")
	azureRPM := fs.Int64("azure-rpm", 0, "Azure OpenAI requests per minute per deployment (0: unlimited)")
	azureWindow := fs.Duration("azure-rpm-window", 0, "enforce -azure-rpm over windows of 1s or 10s, each admitting its share of the minute (0: per minute)")
	latency := fs.Duration("latency", 200*time.Millisecond, "how long an admitted answer takes")
	completion := fs.Int64("completion-tokens", 16, "most output tokens an answer generates")
	defaultOutput := fs.Int64("default-output-tokens", 4096, "output reserved when a request names no maximum")
	anthropicEnc := fs.String("anthropic-encoding", "cl100k_base", "tiktoken encoding that counts Anthropic prompts")
	anthropicFactor := fs.Float64("anthropic-factor", 1.25, "Anthropic prompt tokens per token of -anthropic-encoding")
	maxCounted := fs.Int("max-counted-bytes", 0, "longest text counted with tiktoken-go; longer ones are charged one token per byte (0: count every text)")
	recordPath := fs.String("record", "", "append one JSON line per answered request to this file")
	errorLatency := fs.Duration("error-latency", 0, "how long an invalid request (400) takes to be answered")
	compress := fs.Bool("compress", true, "compress replies in a coding the client accepts (br, zstd, gzip, deflate), as the providers do")
	doneLinger := fs.Duration("done-linger", 0, "hold each chat completion stream open this long after its data: [DONE] (a reply that ends after its end marker)")

	keyLatency := fs.String("key-latency", "", "comma-separated KEY=DURATION: the answers to these API keys take this long instead of -latency")
	keyTPM := fs.String("key-tpm", "", "comma-separated KEY=TOKENS: these API keys are organisations of their own, with this many tokens per period per model on every provider")
	openaiCounting := fs.String("openai-counting", "sum", "how OpenAI requests are counted: sum (prompt + max_tokens) or max_of_chars (the larger of max_tokens and the request's characters / 4)")
	charge := fs.String("charge", "reserved", "what a request costs the limits: reserved (prompt + max_tokens, like OpenAI) or actual (prompt + tokens generated)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	mode, err := ParseMode(*modeName)
	if err != nil {
		return err
	}
	if *period < time.Second {
		return fmt.Errorf("-period %s is under 1s", *period)
	}
	if *openaiCounting != "sum" && *openaiCounting != "max_of_chars" {
		return fmt.Errorf("-openai-counting %q is not sum or max_of_chars", *openaiCounting)
	}
	if *charge != "reserved" && *charge != "actual" {
		return fmt.Errorf("-charge %q is not reserved or actual", *charge)
	}
	if w := *azureWindow; w != 0 && w != time.Second && w != 10*time.Second {
		return fmt.Errorf("-azure-rpm-window %s is not 1s or 10s", w)
	}
	if *doneLinger < 0 {
		return errors.New("-done-linger must not be negative")
	}
	if *azureTPM < 0 || *azureRPM < 0 {
		return errors.New("-azure-tpm and -azure-rpm must not be negative")
	}
	if *geminiTPM < 0 || *geminiRPM < 0 || *geminiRPD < 0 || *geminiCached < 0 {
		return errors.New("-gemini-tpm, -gemini-rpm, -gemini-rpd and -gemini-cached-tokens must not be negative")
	}
	pacific, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		return fmt.Errorf("gemini: %w", err)
	}
	gemini := &Gemini{TPM: *geminiTPM, RPM: *geminiRPM, RPD: *geminiRPD, Period: *period, Factor: *geminiFactor,
		CachedTokens: *geminiCached, Zone: pacific}
	if *geminiClock != "" {
		at, err := time.Parse(time.RFC3339, *geminiClock)
		if err != nil {
			return fmt.Errorf("-gemini-clock: %w", err)
		}
		gemini.SetClock(at, time.Now())
	}
	if *tlsAddr != "" && *tlsDir == "" {
		return errors.New("-tls-addr needs -tls-dir")
	}

	var rw io.Writer
	if *recordPath != "" {
		f, err := os.OpenFile(*recordPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("record: %w", err)
		}
		defer f.Close()
		rw = f
	}
	pricer := &Pricer{DefaultOutput: *defaultOutput, AnthropicEncoding: *anthropicEnc, AnthropicFactor: *anthropicFactor, MaxCounted: *maxCounted}
	// Load the encodings before serving, so that the first requests are not slowed.
	for _, enc := range []string{"o200k_base", "cl100k_base", *anthropicEnc} {
		if _, err := pricer.encoding(enc); err != nil {
			return err
		}
	}
	limits := map[string]Limits{
		"openai":    {Tokens: *openaiTPM, Requests: *openaiRPM},
		"anthropic": {Tokens: *anthropicTPM, Requests: *anthropicRPM},
	}
	kl, err := keyValues(*keyLatency, time.ParseDuration)
	if err != nil {
		return fmt.Errorf("-key-latency: %w", err)
	}
	kt, err := keyValues(*keyTPM, func(v string) (int64, error) { return strconv.ParseInt(v, 10, 64) })
	if err != nil {
		return fmt.Errorf("-key-tpm: %w", err)
	}
	keyEnf := map[string]*Enforcer{}
	for k, n := range kt {
		keyEnf[k] = NewEnforcer(mode, *period, map[string]Limits{"openai": {Tokens: n}, "anthropic": {Tokens: n}}, time.Now)
	}
	srv := &Server{
		Pricer:           pricer,
		Enforcer:         NewEnforcer(mode, *period, limits, time.Now),
		Recorder:         NewRecorder(mode, rw),
		Latency:          *latency,
		KeyLatency:       kl,
		KeyEnforcers:     keyEnf,
		CompletionTokens: *completion,
		EmbeddingDims:    8,
		ChargeActual:     *charge == "actual",
		Compress:         *compress,
		DoneLinger:       *doneLinger,
		CountChars:       *openaiCounting == "max_of_chars",
		Azure:            NewAzure(AzureLimits{TPM: *azureTPM, RPM: *azureRPM, RPMWindow: *azureWindow}),
		Anthropic:        anthropicAccounting(*anthropicITPM, *anthropicOTPM, *anthropicRPM, *cacheMin, *cacheTTL, *period, *spendCap),
		ErrorLatency:     *errorLatency,
		Bedrock:          &Bedrock{TPM: *bedrockTPM, Period: *period},
		Gemini:           gemini,
		Ledger:           &Ledger{},
		Now:              time.Now,
	}

	var servers []*http.Server
	errc := make(chan error, 2)
	serve := func(addr string, tlsDir string) error {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
		scheme := "http"
		if tlsDir != "" {
			cfg, err := serverTLS(tlsDir, strings.Split(*tlsHosts, ","), *tlsCAOut, time.Now())
			if err != nil {
				ln.Close()
				return err
			}
			hs.TLSConfig = cfg
			scheme = "https"
		}
		servers = append(servers, hs)
		fmt.Fprintf(stdout, "mockprovider: %s on %s://%s (mode %s, openai %d tokens/%s, anthropic %d tokens/%s, azure %d tokens and %d requests/min)\n",
			"listening", scheme, ln.Addr(), mode, *openaiTPM, *period, *anthropicTPM, *period, *azureTPM, *azureRPM)
		go func() {
			var err error
			if tlsDir != "" {
				err = hs.ServeTLS(ln, "", "")
			} else {
				err = hs.Serve(ln)
			}
			if !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
		return nil
	}
	if err := serve(*addr, ""); err != nil {
		return err
	}
	if *tlsAddr != "" {
		if err := serve(*tlsAddr, *tlsDir); err != nil {
			return err
		}
	}
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, hs := range servers {
		hs.Shutdown(shutdown) //nolint:errcheck // best effort at exit
	}
	if err != nil {
		return err
	}
	return srv.Recorder.Err()
}

// keyValues parses "KEY=VALUE,KEY=VALUE" with parse for the values.
func keyValues[T any](s string, parse func(string) (T, error)) (map[string]T, error) {
	out := map[string]T{}
	if s == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not KEY=VALUE", kv)
		}
		x, err := parse(v)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", k, err)
		}
		out[k] = x
	}
	return out, nil
}

func probe(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("probe %s: status %d", url, resp.StatusCode)
	}
	return nil
}

// anthropicAccounting is Anthropic's accounting when either token limit is set, else nil.
func anthropicAccounting(itpm, otpm, rpm, cacheMin int64, ttl, period time.Duration, spendCap int64) *Anthropic {
	if itpm <= 0 && otpm <= 0 {
		return nil
	}
	return &Anthropic{RPM: rpm, ITPM: itpm, OTPM: otpm, CacheMin: cacheMin, CacheTTL: ttl, Period: period, SpendCap: spendCap}
}
