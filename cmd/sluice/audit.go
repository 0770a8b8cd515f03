package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-rl/sluice/server/admin"
	"github.com/sluice-rl/sluice/tenant"
)

func init() {
	register("audit", "read the audit log of tenant quotas, switches and resets from a server's admin API: sluice audit [--tenant T] [--actor A]", runAudit)
}

// auditTime reads --since or --until: an RFC 3339 time, or a duration
// before now ("24h").
func auditTime(flagName, v string, now time.Time) (string, error) {
	if v == "" {
		return "", nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d).UTC().Format(time.RFC3339Nano), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t.UTC().Format(time.RFC3339Nano), nil
	}
	return "", fmt.Errorf("audit: %s %q: want an RFC 3339 time (2026-11-26T00:00:00Z) or a duration before now (24h): %w", flagName, v, errUsage)
}

func runAudit(ctx context.Context, args []string, getenv env, stdout, stderr io.Writer) error {
	fs := newFlagSet("audit", stderr)
	var ac adminClient
	ac.flags(fs)
	tenantName := fs.String("tenant", "", "only rows about this tenant")
	actor := fs.String("actor", "", "only rows of this actor (an admin token's name)")
	since := fs.String("since", "", "only rows at or after this time: RFC 3339, or a duration before now such as 24h")
	until := fs.String("until", "", "only rows before this time: RFC 3339, or a duration before now")
	page := addPageFlags(fs, "rows", tenant.MaxAuditPage)
	output := outputFlag(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: sluice audit [--tenant T] [--actor A] [--since T] [--until T] [--limit N] [--cursor C] [--output table|json]")
		fmt.Fprintln(stderr, "\nPrints the audit log (quota changes, switches, resets), newest first, one page at a time.")
		fmt.Fprintln(stderr, "Talks to a server's admin API (--admin-url, SLUICE_ADMIN_URL) with the bearer token in")
		fmt.Fprintln(stderr, "SLUICE_ADMIN_TOKEN or --token-file; a read-only token is enough.")
		fmt.Fprintln(stderr, "\nFlags:")
		fs.PrintDefaults()
	}
	if _, err := parseAdminCommand(fs, args, getenv, 0); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if err := checkOutput("audit", *output); err != nil {
		return err
	}
	q, err := page.query("audit")
	if err != nil {
		return err
	}
	now := time.Now()
	for _, p := range []struct{ flag, name, v string }{{"--since", "since", *since}, {"--until", "until", *until}} {
		t, err := auditTime(p.flag, p.v, now)
		if err != nil {
			return err
		}
		if t != "" {
			q.Set(p.name, t)
		}
	}
	for name, v := range map[string]string{"tenant": *tenantName, "actor": *actor} {
		if v != "" {
			q.Set(name, v)
		}
	}
	out, _, err := ac.do(ctx, getenv, "audit", http.MethodGet, "audit?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	return printAnswer(stdout, "audit", *output, out, printAudit)
}

// printAudit prints a page of the audit log as a table, then how to get
// the next page.
func printAudit(w io.Writer, page admin.AuditPageJSON) error {
	if len(page.Entries) == 0 {
		fmt.Fprintln(w, "no audit rows")
		return nil
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tAT\tACTOR\tACTION\tSUBJECT\tCHANGE")
	for _, e := range page.Entries {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.At.UTC().Format(time.RFC3339), oneLine(e.Actor), e.Action, oneLine(e.Subject), change(e))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if page.Next != "" {
		fmt.Fprintf(w, "more: run again with --cursor %s\n", page.Next)
	}
	return nil
}

// oneLine keeps a table cell on one line.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}

// change summarizes a row's before and after in a few words.
func change(e admin.AuditJSON) string {
	type state struct {
		Tier      string            `json:"tier"`
		State     string            `json:"state"`
		Overrides []json.RawMessage `json:"overrides"`
		Keys      []string          `json:"keys"`
	}
	read := func(b json.RawMessage) (state, bool) {
		var s state
		if len(b) == 0 || string(b) == "null" || json.Unmarshal(b, &s) != nil {
			return s, false
		}
		return s, true
	}
	before, hadBefore := read(e.Before)
	after, hasAfter := read(e.After)
	desc := func(s state) string {
		switch {
		case s.Tier != "":
			return fmt.Sprintf("%s, %d override(s)", s.Tier, len(s.Overrides))
		case s.State != "":
			return s.State
		}
		return ""
	}
	switch {
	case e.Action == "reset" && hasAfter:
		return fmt.Sprintf("%d key(s) reset", len(after.Keys))
	case hadBefore && hasAfter:
		return desc(before) + " -> " + desc(after)
	case hasAfter:
		return "new: " + desc(after)
	case hadBefore:
		return "removed: " + desc(before)
	}
	return ""
}

// pageFlags are the --limit and --cursor of a command that lists a page at
// a time from the admin API (audit, notifications).
type pageFlags struct {
	limit  *int
	cursor *string
	max    int
}

// addPageFlags adds --limit (of what, 1 to max, default 100) and --cursor
// to fs.
func addPageFlags(fs *flag.FlagSet, what string, max int) pageFlags {
	return pageFlags{
		limit:  fs.Int("limit", 100, fmt.Sprintf("%s per page (1–%d)", what, max)),
		cursor: fs.String("cursor", "", "start at this page (the next printed by the previous one)"),
		max:    max,
	}
}

// query returns the page's query parameters, or command's usage error for
// a --limit out of range.
func (p pageFlags) query(command string) (url.Values, error) {
	if *p.limit < 1 || *p.limit > p.max {
		return nil, fmt.Errorf("%s: --limit %d: want 1 to %d: %w", command, *p.limit, p.max, errUsage)
	}
	q := url.Values{"limit": {strconv.Itoa(*p.limit)}}
	if *p.cursor != "" {
		q.Set("cursor", *p.cursor)
	}
	return q, nil
}
