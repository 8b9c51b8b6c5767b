package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	_ "time/tzdata" // quotas' time zones (limits timezone) resolve on images without zoneinfo
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		var ec exitCode
		if errors.As(err, &ec) {
			os.Exit(int(ec))
		}
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "ext-authz:", err)
		}
		os.Exit(2)
	}
}

// exitCode ends the process with a code after the command printed its own message.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// run dispatches a command line; it is main without the process: testable, and the only caller of
// os.Exit is main.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serve(ctx, args, stderr)
	case "check-config":
		return checkConfig(args, stdout, stderr)
	case "estimate":
		return estimate(args, stdin, stdout, stderr)
	case "check":
		return check(ctx, args, stdin, stdout, stderr)
	case "replay":
		return replayCmd(args, stdout, stderr)
	case "top":
		return topCmd(ctx, args, stdin, stdout, stderr)
	case "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", cmd)
}

const usage = `usage:
  ext-authz [serve] [flags]          serve Check (gRPC) and the admin endpoints (HTTP)
  ext-authz check-config FILE        validate a limits file; every problem at once
  ext-authz estimate [flags] [FILE]  price a request body (FILE or stdin) and show the rules and buckets it hits
  ext-authz check [flags] [FILE]     send one Check to a running server and print the answer
  ext-authz replay -config F FILE... replay decision logs against limits offline and report
  ext-authz top -model M [flags]     watch a running service's buckets and decision rates on its admin ports
Run 'ext-authz COMMAND -h' for the flags of each.
`

// envOr returns the environment variable's value, or def.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}
