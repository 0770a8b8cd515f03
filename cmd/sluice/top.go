package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/sluice-rl/sluice/server/admin"
	"github.com/sluice-rl/sluice/server/dashboard"
)

func init() {
	register("top", "the most limited keys per rule, from a server's admin API: sluice top [--domain D] [--rule R]", runTop)
	register("usage", "a tenant's limits, used and remaining, from a server's admin API: sluice usage TENANT", runUsage)
}

// parseAdminCommand parses an operator command's flags and its positional
// arguments (flags may follow them), wanting exactly npos of them.
func parseAdminCommand(fs *flag.FlagSet, args []string, getenv env, npos int) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args, getenv); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	if len(pos) != npos {
		return nil, fmt.Errorf("%s: want %d argument(s), got %q: %w", fs.Name(), npos, pos, errUsage)
	}
	return pos, nil
}

func runTop(ctx context.Context, args []string, getenv env, stdout, stderr io.Writer) error {
	fs := newFlagSet("top", stderr)
	var ac adminClient
	ac.flags(fs)
	domain := fs.String("domain", "", "only this domain")
	rule := fs.String("rule", "", "only this rule (its ID)")
	n := fs.Int("n", 10, "keys per rule (1–100)")
	window := fs.Duration("window", 5*time.Minute, "how far back (up to 15m)")
	output := outputFlag(fs)
	asJSON := fs.Bool("json", false, "the same as --output json (kept for older scripts)")
	watch := fs.Bool("watch", false, "print again every --interval until interrupted (the screen is cleared first on a terminal)")
	interval := fs.Duration("interval", 2*time.Second, "with --watch: time between two refreshes (the server publishes its counts every 2s)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: sluice top [--domain D] [--rule R] [--n 10] [--window 5m] [--output table|json] [--watch [--interval 2s]]")
		fmt.Fprintln(stderr, "\nPrints, per rule, the keys most often denied, with their checks and the error bound of the")
		fmt.Fprintln(stderr, "estimates (fleet-wide when the server runs on Redis). Needs an admin token (read-only is enough).")
		fmt.Fprintln(stderr, "--watch prints again every --interval until interrupted (Ctrl-C: exit status 0); on a terminal")
		fmt.Fprintln(stderr, "it clears the screen first, elsewhere it appends. A failed refresh is reported and the next one")
		fmt.Fprintln(stderr, "tried.")
		fmt.Fprintln(stderr, "\nFlags:")
		fs.PrintDefaults()
	}
	if _, err := parseAdminCommand(fs, args, getenv, 0); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *asJSON {
		*output = "json"
	}
	if err := checkOutput("top", *output); err != nil {
		return err
	}
	if *watch && *interval <= 0 {
		return fmt.Errorf("top: --interval %s: want more than 0: %w", *interval, errUsage)
	}
	q := url.Values{"n": {strconv.Itoa(*n)}, "window": {window.String()}}
	if *domain != "" {
		q.Set("domain", *domain)
	}
	if *rule != "" {
		q.Set("rule", *rule)
	}
	once := func(w io.Writer) error {
		out, _, err := ac.do(ctx, getenv, "top", http.MethodGet, "top?"+q.Encode(), nil)
		if err != nil {
			return err
		}
		return printAnswer(w, "top", *output, out, printTop)
	}
	if !*watch {
		return once(stdout)
	}
	return watchLoop(ctx, *interval, isTerminal(stdout), *output == "table", stdout, stderr, once)
}

// clearScreen moves the cursor home and clears a terminal (ANSI).
const clearScreen = "\x1b[H\x1b[2J"

// watchLoop calls once every interval until ctx ends (an interrupt: not an
// error). Each refresh is printed whole: on a terminal (clear) after
// clearing the screen, elsewhere after a blank line, and with stamp under
// a line giving the time; a refresh that fails is reported on stderr and
// the next one tried.
func watchLoop(ctx context.Context, interval time.Duration, clear, stamp bool, stdout, stderr io.Writer, once func(io.Writer) error) error {
	for i := 0; ; i++ {
		var buf bytes.Buffer // printed whole: no half-drawn screen
		err := once(&buf)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case clear:
			fmt.Fprint(stdout, clearScreen)
		case i > 0 && stamp:
			fmt.Fprintln(stdout)
		}
		if stamp {
			fmt.Fprintf(stdout, "%s (every %s)\n", time.Now().Format(time.TimeOnly), interval)
		}
		_, _ = stdout.Write(buf.Bytes())
		if err != nil {
			fmt.Fprintln(stderr, "sluice:", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// printTop prints a top answer as one table per rule.
func printTop(w io.Writer, top dashboard.TopResponse) error {
	fmt.Fprintf(w, "last %s, %d instance(s)\n", top.Window, len(top.Instances))
	if len(top.Rules) == 0 {
		fmt.Fprintln(w, "no decisions in this window")
		return nil
	}
	for _, r := range top.Rules {
		fmt.Fprintf(w, "\n%s/%s: %d checks, %d denied (counts may be over by up to %d checks, %d denials)\n",
			r.Domain, r.Rule, r.Checks, r.Denials, r.ErrorBound.Checks, r.ErrorBound.Denials)
		if len(r.TopDenied) == 0 {
			fmt.Fprintln(w, "  nothing denied")
			continue
		}
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "  DENIED\tCHECKED\t\tKEY")
		for _, o := range r.TopDenied {
			fmt.Fprintf(tw, "  %d\t%d\t\t%s\n", o.Denials, o.Checks, o.Key)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func runUsage(ctx context.Context, args []string, getenv env, stdout, stderr io.Writer) error {
	fs := newFlagSet("usage", stderr)
	var ac adminClient
	ac.flags(fs)
	output := outputFlag(fs)
	asJSON := fs.Bool("json", false, "the same as --output json (kept for older scripts)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: sluice usage TENANT [--output table|json]")
		fmt.Fprintln(stderr, "\nPrints each limit that applies to the tenant: its limit, used, remaining and reset, read")
		fmt.Fprintln(stderr, "from the store without charging. Needs an admin token (read-only is enough).")
		fmt.Fprintln(stderr, "\nFlags:")
		fs.PrintDefaults()
	}
	pos, err := parseAdminCommand(fs, args, getenv, 1)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *asJSON {
		*output = "json"
	}
	if err := checkOutput("usage", *output); err != nil {
		return err
	}
	out, _, err := ac.do(ctx, getenv, "usage", http.MethodGet, "usage/"+url.PathEscape(pos[0]), nil)
	if err != nil {
		return err
	}
	now := time.Now()
	return printAnswer(stdout, "usage", *output, out, func(w io.Writer, u admin.UsageJSON) error { return printUsage(w, u, now) })
}

// printUsage prints a usage answer as a table.
func printUsage(w io.Writer, u admin.UsageJSON, now time.Time) error {
	fmt.Fprintf(w, "tenant %s\n", u.Tenant)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DOMAIN\tRULE\tDESCRIPTOR\tLIMIT\tUSED\tREMAINING\tRESET IN\t")
	for _, l := range u.Limits {
		per := l.Unit
		if per == "" {
			per = l.Window
		}
		reset := "now"
		if d := l.Reset.Sub(now); d > 0 {
			reset = d.Round(time.Second).String()
		}
		if l.Degraded != "" {
			reset += " (" + l.Degraded + ")"
		}
		desc := l.Descriptor
		if l.Counter != "" {
			desc = l.Counter
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%s\t%d\t%d\t%s\t\n", l.Domain, l.Rule, desc, l.Limit, per, l.Used, l.Remaining, reset)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if u.Skipped > 0 {
		fmt.Fprintf(w, "%d rule(s) counted per value below the tenant key are not listed (the store cannot list its keys)\n", u.Skipped)
	}
	for _, r := range u.Truncated {
		fmt.Fprintf(w, "%s has more counters than listed (%d)\n", r, admin.MaxUsageCounters)
	}
	return nil
}
