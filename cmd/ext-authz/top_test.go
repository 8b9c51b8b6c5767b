package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
)

const topLimits = `
tenant: {source: header, header: x-tenant-id}
rules:
  - name: tenant-requests
    per: [tenant]
    requests: {limit: 3, period: hour}
`

// checks sends n Checks for tenant and returns how many were denied.
func checks(t *testing.T, client authv3.AuthorizationClient, tenant string, n int) int {
	t.Helper()
	denied := 0
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := client.Check(ctx, chatRequest("gpt-4o", 10, map[string]string{"x-tenant-id": tenant}))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetDeniedResponse() != nil {
			denied++
		}
	}
	return denied
}

// top -once against a running service: a bucket drained by one Check shows below capacity,
// and once the budget is spent, the Checks denied between top's two scrapes show as a denied
// rate above zero. The frame is plain text.
func TestTopOnceProcess(t *testing.T) {
	t.Parallel()
	p := startProc(t, "-config", writeFile(t, "limits.yaml", topLimits))
	client := authv3.NewAuthorizationClient(p.dial(t))
	topOnce := func(interval string, during func()) string {
		t.Helper()
		var out, errb strings.Builder
		done := make(chan error, 1)
		go func() {
			done <- run(context.Background(), []string{"top", "-once", "-admin", "http://" + p.adminAddr, "-model", "gpt-4o",
				"-tenant", "team-a", "-tenant", "team-b", "-interval", interval}, nil, &out, &errb)
		}()
		for {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("top: %v %s", err, errb.String())
				}
				if strings.ContainsRune(out.String(), 0x1b) {
					t.Errorf("plain frame has an escape byte: %q", out.String())
				}
				return out.String()
			default:
				during()
			}
		}
	}
	if denied := checks(t, client, "team-a", 1); denied != 0 {
		t.Fatalf("first Check denied")
	}
	frame := topOnce("100ms", func() {})
	row := regexp.MustCompile(`(?m)^tenant-requests\s+team-a\s+\*\s+requests\s+\[[#.]+\]\s+33%\s+2/3\s+3\s+per hour\s+\S+\s+0$`)
	if !row.MatchString(frame) || !regexp.MustCompile(`team-b\s+\*\s+requests`).MatchString(frame) || !strings.Contains(frame, "3/3") {
		t.Fatalf("frame does not show team-a drained to 2/3 and team-b full:\n%s", frame)
	}
	if denied := checks(t, client, "team-a", 2); denied != 0 {
		t.Fatalf("Checks within the budget denied")
	}
	// Spent: every Check while top scrapes is denied.
	var mu sync.Mutex
	n := 0
	frame = topOnce("500ms", func() {
		if checks(t, client, "team-a", 1) != 1 {
			t.Error("a Check over the budget allowed")
		}
		mu.Lock()
		n++
		mu.Unlock()
	})
	m := regexp.MustCompile(`admitted ([0-9.]+)/s  denied ([0-9.]+)/s`).FindStringSubmatch(frame)
	if m == nil {
		t.Fatalf("no rates in frame:\n%s", frame)
	}
	if d, _ := strconv.ParseFloat(m[2], 64); d <= 0 || m[1] != "0.0" {
		t.Errorf("after %d denied Checks: rates admitted %s/s denied %s/s, want 0 and above 0:\n%s", n, m[1], m[2], frame)
	}
	if !strings.Contains(frame, "100%  0/3") {
		t.Errorf("spent bucket not shown at 100%%:\n%s", frame)
	}
}

// topTerminalLimits refill fast: a request every half second, so that the terminal test sees a
// bucket drained by load refill once the load stops.
const topTerminalLimits = `
tenant: {source: header, header: x-tenant-id}
rules:
  - name: tenant-requests
    per: [tenant]
    requests: {limit: 4, period: 2s}
`

// top under a real pseudo-terminal: it draws a frame with the rule, redraws the bucket drained
// by a load of Checks (empty, denials counted), then refilled once the load stops, and exits
// with status 0 on q.
func TestTopTerminal(t *testing.T) {
	t.Parallel()
	p := startProc(t, "-config", writeFile(t, "limits.yaml", topTerminalLimits))
	client := authv3.NewAuthorizationClient(p.dial(t))
	args, _ := json.Marshal([]string{"top", "-admin", "http://" + p.adminAddr, "-model", "gpt-4o", "-tenant", "team-a", "-interval", "100ms"})
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "EXT_AUTHZ_MAIN=1", "EXT_AUTHZ_ARGS="+string(args), "TERM=xterm-256color")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 30, Cols: 120})
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	var mu sync.Mutex
	var screen strings.Builder
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]byte, 4096)
		for {
			n, err := tty.Read(buf)
			// Answer the queries a terminal answers (background colour, cursor position), as
			// termenv waits for them at start-up.
			if strings.Contains(string(buf[:n]), "\x1b]11;?") {
				io.WriteString(tty, "\x1b]11;rgb:0000/0000/0000\x1b\\") //nolint:errcheck // top may have exited
			}
			if strings.Contains(string(buf[:n]), "\x1b[6n") {
				io.WriteString(tty, "\x1b[1;1R") //nolint:errcheck // top may have exited
			}
			mu.Lock()
			screen.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() }) //nolint:errcheck // may have exited
	// waitFor waits for what to be drawn after the screen's first from bytes.
	mark := func() int { mu.Lock(); defer mu.Unlock(); return screen.Len() }
	waitFor := func(from int, what string) {
		t.Helper()
		re := regexp.MustCompile(regexp.QuoteMeta(what))
		if strings.HasPrefix(what, "re:") {
			re = regexp.MustCompile(what[3:])
		}
		deadline := time.After(10 * time.Second)
		for {
			mu.Lock()
			s := screen.String()[from:]
			mu.Unlock()
			if re.MatchString(s) {
				return
			}
			select {
			case <-deadline:
				t.Fatalf("the terminal never showed %q:\n%q", what, s)
			case err := <-exited:
				t.Fatalf("top exited (%v) before showing %q:\n%q", err, what, s)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	waitFor(0, "tenant-requests")
	waitFor(0, "4/4")
	mu.Lock()
	drawn := screen.String()
	mu.Unlock()
	if !strings.Contains(drawn, "\x1b[") {
		t.Error("no escape codes: not drawn as a terminal")
	}
	// Load: a Check every 20 ms, eight times the refill, until the bucket is seen empty.
	stop, loaded := make(chan struct{}), make(chan int)
	go func() {
		denied := 0
		for {
			select {
			case <-stop:
				loaded <- denied
				return
			case <-time.After(20 * time.Millisecond):
				denied += checks(t, client, "team-a", 1)
			}
		}
	}()
	from := mark()
	waitFor(from, "0/4")
	waitFor(from, "100%")
	waitFor(from, `re:denied [1-9][0-9.]*/s`) // the rates line redrawn with the load's denials
	close(stop)
	if denied := <-loaded; denied == 0 {
		t.Fatal("the load was never denied")
	}
	from = mark()
	waitFor(from, "4/4") // refilled after the load
	if _, err := io.WriteString(tty, "q"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("top on q: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("top did not exit on q")
	}
}
