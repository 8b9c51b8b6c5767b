package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
	"github.com/llm-ratelimit/llm-ratelimit/internal/filter"
	"github.com/llm-ratelimit/llm-ratelimit/internal/learn"
	"github.com/llm-ratelimit/llm-ratelimit/internal/price"
	"github.com/llm-ratelimit/llm-ratelimit/internal/server"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tokens"
)

// checkConfig validates a limits file and prints every problem.
func checkConfig(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("check-config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, "usage: ext-authz check-config FILE") }
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return exitCode(2)
	}
	c, err := config.Load(fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitCode(1)
	}
	if _, err := server.NewPolicy(c); err != nil {
		fmt.Fprintln(stderr, err)
		return exitCode(1)
	}
	if len(c.Plans) > 0 {
		fmt.Fprintf(stdout, "%s: ok (%d rules, %d plans, %d tenants assigned, default plan %s)\n", fs.Arg(0), len(c.Rules), len(c.Plans), c.Assigned(), c.DefaultPlan.Name)
		return nil
	}
	fmt.Fprintf(stdout, "%s: ok (%d rules)\n", fs.Arg(0), len(c.Rules))
	return nil
}

// requestFlags build a CheckRequest the way Envoy would send it.
type requestFlags struct {
	path    string
	host    string
	method  string
	headers headerList
	ext     headerList
	source  string
	jwt     string
	jwtKey  string
}

type headerList []string

func (h *headerList) String() string     { return strings.Join(*h, ", ") }
func (h *headerList) Set(v string) error { *h = append(*h, v); return nil }

func (rf *requestFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&rf.path, "path", "/v1/chat/completions", "request path (with the query string)")
	fs.StringVar(&rf.host, "host", "", "request host (:authority); it decides the provider (empty: the path does)")
	fs.StringVar(&rf.method, "method", "POST", "request method")
	fs.Var(&rf.headers, "H", "request header 'name: value' (repeatable)")
	fs.Var(&rf.ext, "ext", "route context_extensions entry 'key=value' (repeatable)")
	fs.StringVar(&rf.source, "principal", "", "the peer's mTLS principal (source.principal)")
	fs.StringVar(&rf.jwt, "jwt", "", "a verified JWT's payload as JSON, as Envoy's jwt_authn passes it in metadata_context")
	fs.StringVar(&rf.jwtKey, "jwt-key", "jwt_payload", "jwt_authn's payload_in_metadata (the limits file's jwt.payload_in_metadata)")
}

func (rf *requestFlags) build(body []byte) (*authv3.CheckRequest, error) {
	hdr := map[string]string{":path": rf.path, ":authority": rf.host, ":method": rf.method,
		"content-type": "application/json", "content-length": strconv.Itoa(len(body))}
	for _, h := range rf.headers {
		k, v, ok := strings.Cut(h, ":")
		if !ok {
			return nil, fmt.Errorf("header %q is not 'name: value'", h)
		}
		hdr[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
	}
	var ext map[string]string
	for _, e := range rf.ext {
		k, v, ok := strings.Cut(e, "=")
		if !ok {
			return nil, fmt.Errorf("context extension %q is not 'key=value'", e)
		}
		if ext == nil {
			ext = map[string]string{}
		}
		ext[k] = v
	}
	req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{Principal: rf.source},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method: rf.method, Path: rf.path, Host: rf.host, Headers: hdr,
			Size: int64(len(body)), RawBody: body, Protocol: "HTTP/1.1",
		}},
		ContextExtensions: ext,
	}}
	if rf.jwt != "" {
		payload := &structpb.Struct{}
		if err := protojson.Unmarshal([]byte(rf.jwt), payload); err != nil {
			return nil, fmt.Errorf("-jwt: %w", err)
		}
		st := &structpb.Struct{Fields: map[string]*structpb.Value{rf.jwtKey: structpb.NewStructValue(payload)}}
		req.Attributes.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{config.JWTNamespace: st}}
	}
	return req, nil
}

func readBody(fs *flag.FlagSet, stdin io.Reader) ([]byte, error) {
	switch fs.NArg() {
	case 0:
		return io.ReadAll(io.LimitReader(stdin, 64<<20))
	case 1:
		if fs.Arg(0) == "-" {
			return io.ReadAll(io.LimitReader(stdin, 64<<20))
		}
		return os.ReadFile(fs.Arg(0))
	}
	return nil, errors.New("at most one body FILE")
}

// estimate prices a body and shows the rules and buckets it would hit.
func estimate(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("estimate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var rf requestFlags
	rf.register(fs)
	cfgPath := fs.String("config", envOr("CONFIG", ""), "limits file; default: the embedded example")
	redisURL := fs.String("redis-url", envOr("REDIS_URL", ""), "the shared store whose learned ratios to show (env REDIS_URL); empty: none")
	redisPrefix := fs.String("redis-prefix", envOr("REDIS_PREFIX", "llmrl:"), "prefix of every Redis key (env REDIS_PREFIX)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	body, err := readBody(fs, stdin)
	if err != nil {
		return err
	}
	cfg, err := server.LoadConfig(*cfgPath)
	if err != nil {
		return err
	}
	pol, err := server.NewPolicy(cfg)
	if err != nil {
		return err
	}
	f, err := filter.New(pol, filter.Options{Limiter: bucket.NewMemory(bucket.MemoryOptions{}), Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	req, err := rf.build(body)
	if err != nil {
		return err
	}
	start := time.Now()
	x, err := f.Explain(req)
	if err != nil {
		return err
	}
	took := time.Since(start)
	e := x.Estimate
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	prov := e.ProviderName()
	if e.Name != "" {
		prov += " (" + e.Provider.String() + " dialect)"
	}
	fmt.Fprintf(tw, "provider\t%s\napi\t%s\nmodel\t%q\n", prov, e.API, e.Model)
	fmt.Fprintf(tw, "prompt tokens\t%d\noutput tokens\t%d\ncost\t%d\n", e.PromptTokens, e.OutputTokens, e.Cost())
	exact := "exact"
	if !e.Exact {
		exact = "approximate (" + string(e.Reason) + ")"
	}
	fmt.Fprintf(tw, "count\t%s\nstream\t%v\npriced in\t%s\n", exact, e.Stream, took.Round(time.Microsecond))
	if !e.Exact && e.Reason.Learnable() {
		fmt.Fprintf(tw, "learned\t%s\n", learned(cfg, &e, *redisURL, *redisPrefix))
	}
	fmt.Fprintf(tw, "tenant\t%q (from %s)\npriority\t%s\n", x.Tenant, x.TenantSource, x.Priority)
	if x.Plan != "" {
		fmt.Fprintf(tw, "plan\t%s (from %s)\n", x.Plan, x.PlanSource)
	}
	fmt.Fprintf(tw, "rules\t%s\n", strings.Join(x.Rules, ", "))
	if x.Priced {
		// The most the request can cost: what its money budgets reserve until the response
		// settles the actual cost.
		fmt.Fprintf(tw, "reserved spend\t%s USD (input %s, cache write %s, output %s USD per million tokens)\n",
			price.FormatMoney(x.Spend), price.FormatMoney(x.Price.Input), price.FormatMoney(x.Price.CacheWrite), price.FormatMoney(x.Price.Output))
	}
	if x.Unpriced != "" {
		fmt.Fprintf(tw, "refused\tno price for the model under the cost limit of rule %s (add it under prices)\n", x.Unpriced)
	}
	tw.Flush()
	if x.Unpriced != "" {
		fmt.Fprintln(stdout, "buckets: none (the request is refused before any is taken)")
		return nil
	}
	if len(x.Buckets) == 0 {
		fmt.Fprintln(stdout, "buckets: none (no rule applies: the request is not limited)")
		return nil
	}
	fmt.Fprintf(stdout, "buckets (hash tag {%s}):\n", x.Tag)
	tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  name\tslot\talgorithm\tlimit\tperiod\tcapacity\tcost\tfloor\tshadow")
	for i, b := range x.Buckets {
		period := b.Period.String()
		if b.Algorithm == bucket.Quota {
			zone := "UTC"
			if b.Zone != nil {
				zone = b.Zone.String()
			}
			period = map[bucket.Calendar]string{bucket.Day: "day", bucket.Month: "month"}[b.Calendar] + " (" + zone + ")"
		}
		// A rule's tokens and requests token buckets share one stored key, each in its slot.
		slot := "-"
		if b.Slot > 0 {
			slot = strconv.Itoa(int(b.Slot))
		}
		fmt.Fprintf(tw, "  %q\t%s\t%s\t%d\t%s\t%d\t%d\t%g\t%v\n", b.Name, slot, b.Algorithm, b.Limit, period, b.Capacity(), b.Cost, b.Floor, x.Shadow[i])
	}
	return tw.Flush()
}

// learned describes the learned price of e's prompt next to its static one (the prompt tokens
// shown): read from the store at redisURL, the figure every replica prices with.
func learned(cfg *config.Config, e *tokens.Estimate, redisURL, prefix string) string {
	if redisURL == "" {
		return "not read (-redis-url names the shared store holding it)"
	}
	client, err := bucket.NewClient(redisURL, bucket.ClientOptions{})
	if err != nil {
		return "not read: " + err.Error()
	}
	defer client.Close()
	sh := learn.NewShared(learn.NewRedis(client, prefix, 0), learn.SharedOptions{Policy: cfg.Learn})
	k := learn.Key{Provider: e.ProviderName(), Model: e.Model, Reason: string(e.Reason)}
	sh.Factor(k)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := sh.Sync(ctx); err != nil {
		return "not read: " + err.Error()
	}
	l, pol := sh.Factor(k), cfg.Learn
	state := ""
	if !cfg.LearnEnabled {
		state = "; pricing.learn.enabled is false: not applied"
	}
	if !l.Learned {
		return fmt.Sprintf("static until %g samples (%.1f so far)%s", pol.MinSamples, l.Samples, state)
	}
	return fmt.Sprintf("%d prompt tokens (factor %.4f: p%g ratio %.4f over %.1f samples, clamped to [%g, %g])%s",
		learn.Price(e.PromptTokens, l.Factor), l.Factor, pol.Quantile*100, l.Quantile, l.Samples, pol.Min, pol.Max, state)
}

// check sends one Check to a running server and prints the decision.
func check(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var rf requestFlags
	rf.register(fs)
	addr := fs.String("addr", envOr("GRPC_ADDR", "127.0.0.1:9001"), "the server's gRPC address")
	timeout := fs.Duration("timeout", 2*time.Second, "deadline of the Check, like Envoy's ext_authz timeout")
	if err := fs.Parse(args); err != nil {
		return err
	}
	body, err := readBody(fs, stdin)
	if err != nil {
		return err
	}
	req, err := rf.build(body)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	start := time.Now()
	resp, err := authv3.NewAuthorizationClient(conn).Check(ctx, req)
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	printResponse(stdout, resp, time.Since(start))
	return nil
}

func printResponse(w io.Writer, resp *authv3.CheckResponse, took time.Duration) {
	var hdrs []*corev3.HeaderValueOption
	var body string
	if ok := resp.GetOkResponse(); ok != nil {
		fmt.Fprintf(w, "allowed (%s)\n", took.Round(time.Microsecond))
		hdrs = ok.GetResponseHeadersToAdd()
	} else if d := resp.GetDeniedResponse(); d != nil {
		fmt.Fprintf(w, "denied: HTTP %d (%s)\n", int(d.GetStatus().GetCode()), took.Round(time.Microsecond))
		hdrs, body = d.GetHeaders(), d.GetBody()
	}
	sort.Slice(hdrs, func(i, j int) bool { return hdrs[i].GetHeader().GetKey() < hdrs[j].GetHeader().GetKey() })
	for _, h := range hdrs {
		fmt.Fprintf(w, "  %s: %s\n", h.GetHeader().GetKey(), h.GetHeader().GetValue())
	}
	if body != "" {
		fmt.Fprintf(w, "  body: %s\n", body)
	}
	if md := resp.GetDynamicMetadata(); md != nil {
		keys := make([]string, 0, len(md.GetFields()))
		for k := range md.GetFields() {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintln(w, "  metadata:")
		for _, k := range keys {
			v, _ := md.GetFields()[k].MarshalJSON()
			fmt.Fprintf(w, "    %s: %s\n", k, v)
		}
	}
}
