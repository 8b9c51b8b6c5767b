package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/term"

	"github.com/llm-ratelimit/llm-ratelimit/internal/top"
)

// topCmd shows a running service's buckets and decision rates, read on its admin ports: live in
// a terminal, or one plain-text frame when stdout is not one or with -once.
func topCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("top", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var admins headerList
	fs.Var(&admins, "admin", "an admin port URL of the service; repeatable, one per replica, to sum their rates (default $ADMIN_URL, comma-separated, or http://127.0.0.1:9090)")
	provider := fs.String("provider", "openai", "the provider of the buckets, as rules match it")
	var models, tenants headerList
	fs.Var(&models, "model", "a model whose buckets to show, as requests name it (repeatable; at least one)")
	fs.Var(&tenants, "tenant", "a tenant whose buckets to show (repeatable; default: the default tenant)")
	rule := fs.String("rule", "", "only this rule's buckets")
	interval := fs.Duration("interval", time.Second, "time between refreshes; with -once, between the two scrapes the rates come from")
	once := fs.Bool("once", false, "print one plain-text frame and exit (also when stdout is not a terminal)")
	width := fs.Int("width", 100, "the plain-text frame's width in columns")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(models) == 0 || slices.Contains(models, "") || fs.NArg() > 0 || *interval <= 0 || *width < 1 {
		fs.Usage()
		return exitCode(2)
	}
	if len(tenants) == 0 {
		tenants = headerList{""}
	}
	if len(admins) == 0 {
		admins = strings.Split(envOr("ADMIN_URL", "http://127.0.0.1:9090"), ",")
	}
	if slices.Contains(admins, "") {
		fs.Usage()
		return exitCode(2)
	}
	scopes := make([]top.Scope, 0, len(models)*len(tenants))
	for _, m := range models {
		for _, t := range tenants {
			scopes = append(scopes, top.Scope{Provider: *provider, Model: m, Tenant: t, Rule: *rule})
		}
	}
	where := admins[0]
	if len(admins) > 1 {
		where = fmt.Sprintf("%s +%d", admins[0], len(admins)-1)
	}
	title := fmt.Sprintf("%s  %s/%s  every %s", where, *provider, strings.Join(models, ","), *interval)
	if *rule != "" {
		title += "  rule " + *rule
	}
	client := &top.Client{Bases: admins, HTTP: &http.Client{Timeout: max(*interval, 2*time.Second)}}

	out, isFile := stdout.(*os.File)
	if *once || !isFile || !term.IsTerminal(out.Fd()) {
		// Two scrapes, interval apart, so that the one frame has rates.
		_, first, err := client.Poll(ctx, scopes, nil)
		if err != nil {
			return err
		}
		select {
		case <-time.After(*interval):
		case <-ctx.Done():
			return ctx.Err()
		}
		snap, _, err := client.Poll(ctx, scopes, first)
		if err != nil {
			return err
		}
		_, err = io.WriteString(stdout, top.Render(snap, top.View{Title: title}, *width))
		return err
	}
	p := tea.NewProgram(top.NewModel(client, scopes, *interval, title),
		tea.WithContext(ctx), tea.WithInput(stdin), tea.WithOutput(out), tea.WithAltScreen())
	_, err := p.Run()
	if errors.Is(err, tea.ErrProgramKilled) && ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("top: %w", err)
	}
	return nil
}
