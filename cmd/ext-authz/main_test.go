package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/learn"
	"github.com/llm-ratelimit/llm-ratelimit/internal/redistest"
)

// The test binary doubles as the service: with EXT_AUTHZ_MAIN=1 it runs main's run() on its
// arguments, so that tests start real processes of the same code without a separate build.
func TestMain(m *testing.M) {
	if os.Getenv("EXT_AUTHZ_MAIN") == "1" {
		var args []string
		if err := json.Unmarshal([]byte(os.Getenv("EXT_AUTHZ_ARGS")), &args); err != nil {
			panic(err)
		}
		main2(args)
		return
	}
	os.Exit(m.Run())
}

// main2 is main with explicit arguments.
func main2(args []string) {
	os.Args = append([]string{"ext-authz"}, args...)
	main()
}

// proc is an ext-authz process started by a test.
type proc struct {
	cmd       *exec.Cmd
	grpcAddr  string
	adminAddr string
	logs      *logBuffer
	done      chan struct{}
}

type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startProc starts ext-authz serve with args (plus loopback listeners on free ports) and waits
// until its gRPC health reports SERVING.
func startProc(t *testing.T, args ...string) *proc {
	t.Helper()
	p := startUnready(t, args...)
	p.waitServing(t)
	return p
}

// startUnready starts ext-authz serve like startProc, but returns as soon as it listens.
func startUnready(t *testing.T, args ...string) *proc {
	t.Helper()
	args = append([]string{"serve", "-grpc-addr", "127.0.0.1:0", "-admin-addr", "127.0.0.1:0"}, args...)
	cmd := exec.Command(os.Args[0])
	argv, _ := json.Marshal(args)
	cmd.Env = append(os.Environ(), "EXT_AUTHZ_MAIN=1", "EXT_AUTHZ_ARGS="+string(argv))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, logs: &logBuffer{}, done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan [2]string, 1)
	go func() {
		sc := bufio.NewScanner(io.TeeReader(stderr, p.logs))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var line struct {
				Msg   string `json:"msg"`
				GRPC  string `json:"grpc"`
				Admin string `json:"admin"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "serving" {
				addr <- [2]string{line.GRPC, line.Admin}
			}
		}
		cmd.Wait() //nolint:errcheck // exit status checked through done
		close(p.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill() //nolint:errcheck // may have exited
		<-p.done
		if t.Failed() {
			t.Logf("ext-authz %v logs:\n%s", args, p.logs.String())
		}
	})
	select {
	case a := <-addr:
		p.grpcAddr, p.adminAddr = a[0], a[1]
	case <-p.done:
		t.Fatalf("ext-authz exited at start-up:\n%s", p.logs.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("ext-authz did not start:\n%s", p.logs.String())
	}
	return p
}

// waitServing waits until the process's gRPC health reports SERVING.
func (p *proc) waitServing(t *testing.T) {
	t.Helper()
	conn := p.dial(t)
	hc := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: authv3.Authorization_ServiceDesc.ServiceName})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ext-authz not SERVING (%v %v):\n%s", resp.GetStatus(), err, p.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *proc) dial(t *testing.T) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func chatRequest(model string, maxTokens int, headers map[string]string) *authv3.CheckRequest {
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"Hello there"}],"max_tokens":%d}`, model, maxTokens)
	h := map[string]string{":path": "/v1/chat/completions", ":method": "POST", ":authority": "api.openai.com",
		"content-type": "application/json", "content-length": fmt.Sprint(len(body))}
	for k, v := range headers {
		h[k] = v
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
		Http: &authv3.AttributeContext_HttpRequest{Method: "POST", Path: "/v1/chat/completions", Headers: h, RawBody: []byte(body)},
	}}}
}

func TestCheckConfigCommand(t *testing.T) {
	t.Parallel()
	var out, errb strings.Builder
	good := writeFile(t, "good.yaml", "rules: [{name: a, tokens: {limit: 10, period: minute}}]\n")
	if err := run(context.Background(), []string{"check-config", good}, nil, &out, &errb); err != nil {
		t.Fatalf("valid file: %v %s", err, errb.String())
	}
	if !strings.Contains(out.String(), "ok (1 rules)") {
		t.Errorf("stdout = %q", out.String())
	}
	out.Reset()
	bad := writeFile(t, "bad.yaml", "rules: [{name: a, tokens: {limit: -1, period: week}}]\nextra: 1\n")
	err := run(context.Background(), []string{"check-config", bad}, nil, &out, &errb)
	if ec, ok := err.(exitCode); !ok || ec != 1 {
		t.Fatalf("invalid file: err = %v", err)
	}
	for _, want := range []string{"3 problem(s)", "field extra not found", "rules[0].tokens.limit", "rules[0].tokens.period"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb.String())
		}
	}
}

func TestEstimateCommand(t *testing.T) {
	t.Parallel()
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"Hello"}],"max_tokens":100}`
	var out, errb strings.Builder
	if err := run(context.Background(), []string{"estimate", "-H", "x-tenant-id: team-a"}, strings.NewReader(body), &out, &errb); err != nil {
		t.Fatalf("%v %s", err, errb.String())
	}
	for _, want := range []string{"provider       openai", "model          \"gpt-4o\"", "output tokens  100",
		"count          exact", "tenant         \"team-a\"", "rules          openai-per-model, tenant-fair-share", "openai-per-model:b|m6:gpt-4o\"   1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// The embedded example limits Gemini the way Google counts it: requests, input tokens, and a
// daily quota whose days end at Pacific midnight, which estimate names.
func TestEstimateGeminiDailyQuota(t *testing.T) {
	t.Parallel()
	body := `{"contents":[{"role":"user","parts":[{"text":"Hello"}]}],"generationConfig":{"maxOutputTokens":100}}`
	var out, errb strings.Builder
	args := []string{"estimate", "-H", "host: generativelanguage.googleapis.com", "-path", "/v1beta/models/gemini-2.5-flash:generateContent"}
	if err := run(context.Background(), args, strings.NewReader(body), &out, &errb); err != nil {
		t.Fatalf("%v %s", err, errb.String())
	}
	for _, want := range []string{"provider       gemini", "rules          gemini-per-model", "quota         250     day (America/Los_Angeles)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestUnknownCommand(t *testing.T) {
	t.Parallel()
	var out, errb strings.Builder
	if err := run(context.Background(), []string{"frobnicate"}, nil, &out, &errb); err == nil || !strings.Contains(errb.String(), "usage:") {
		t.Fatalf("err = %v, stderr %q", err, errb.String())
	}
}

// estimate shows the learned price of an estimated prompt next to its static one, read from the
// shared store; without a store it says it did not read one.
func TestEstimateShowsLearned(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	body := `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"Hello there, how are you?"}]}`
	args := []string{"estimate", "-H", "host: api.anthropic.com", "-path", "/v1/messages"}
	var out, errb strings.Builder
	if err := run(context.Background(), args, strings.NewReader(body), &out, &errb); err != nil {
		t.Fatalf("%v %s", err, errb.String())
	}
	if !strings.Contains(out.String(), "learned        not read") {
		t.Fatalf("without a store:\n%s", out.String())
	}
	client, err := bucket.NewClient(srv.URL(), bucket.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	sh := learn.NewShared(learn.NewRedis(client, "llmrl:", time.Hour), learn.SharedOptions{Policy: learn.DefaultPolicy})
	for range 60 {
		sh.Observe(learn.Key{Provider: "anthropic", Model: "claude-sonnet-4-5", Reason: "anthropic_estimate"}, 75, 100)
	}
	if err := sh.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run(context.Background(), append(args, "-redis-url", srv.URL()), strings.NewReader(body), &out, &errb); err != nil {
		t.Fatalf("%v %s", err, errb.String())
	}
	for _, want := range []string{"count          approximate (anthropic_estimate)", "(factor 0.75", "p99 ratio 0.75", "over 60.0 samples", "pricing.learn.enabled is false"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
