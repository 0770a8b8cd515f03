package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/server/admin"
)

func init() {
	register("quota", "manage tenant quotas through the admin API: sluice quota set|get|rm|list|reset", runQuota)
}

// quotaOverrides collects --override DESCRIPTOR=N/UNIT flags, each in the
// domain of the --domain flag given before it.
type quotaOverrides struct {
	domain string
	list   []admin.OverrideJSON
}

// domainFlag is --domain: it sets the domain of the --override flags that
// follow it.
type domainFlag struct{ q *quotaOverrides }

func (d domainFlag) String() string { return "" }

func (d domainFlag) Set(s string) error {
	if s == "" {
		return errors.New("must not be empty")
	}
	d.q.domain = s
	return nil
}

func (q *quotaOverrides) String() string { return "" }

func (q *quotaOverrides) Set(s string) error {
	if q.domain == "" {
		return fmt.Errorf("%q: give --domain DOMAIN (the rule file's domain) before the --override flags of that domain", s)
	}
	i := strings.LastIndexByte(s, '=')
	if i < 0 {
		return fmt.Errorf("%q: want DESCRIPTOR=N/UNIT, such as 'endpoint:POST /api/v1/orders=500/minute'", s)
	}
	desc, lim := s[:i], s[i+1:]
	// N alone (no unit nor window) keeps the rule's period: a calendar
	// rule's calendar.
	n, per, hasPer := strings.Cut(lim, "/")
	rpu, err := strconv.ParseInt(n, 10, 64)
	if err != nil || rpu < 0 || (hasPer && per == "") {
		return fmt.Errorf("%q: want N/UNIT (or N alone: the rule's own period) after the last '=', such as 500/minute, 10/90s or 50000", s)
	}
	o := admin.OverrideJSON{Domain: q.domain, Descriptor: desc, Spec: rules.Spec{RequestsPerUnit: rpu}}
	switch _, err := time.ParseDuration(per); {
	case !hasPer: // neither unit nor window
	case err == nil:
		o.Window = per
	default:
		o.Unit = per
	}
	q.list = append(q.list, o)
	return nil
}

// adminClient calls a server's admin API for the operator commands (quota,
// top, usage).
type adminClient struct {
	base, tokenFile, tokenName string
	timeout                    time.Duration
}

// flags registers --admin-url, --token-file, --token-name and --timeout.
func (c *adminClient) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.base, "admin-url", "http://127.0.0.1:8080", "base URL of the server's HTTP listener (env SLUICE_ADMIN_URL)")
	fs.StringVar(&c.tokenFile, "token-file", "", "file holding the bearer token, alone or as the server's --admin-token-file lines '<name> <rw|ro|charge> <token>' (default: SLUICE_ADMIN_TOKEN)")
	fs.StringVar(&c.tokenName, "token-name", "", "with a --token-file of several '<name> <access> <token>' lines: the name of the one to send")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "how long to wait for the answer")
}

// tokenFileFormat is what fileToken accepts, for its errors.
const tokenFileFormat = "want a file holding the token alone, or the server's --admin-token-file lines '<name> <rw|ro|charge> <token>'"

// fileToken returns the token of a --token-file: the file's one word (blank
// lines and # comments aside), or, in the server's --admin-token-file
// format, the token of the line named name, or of the only line when name is
// "". Errors never quote the file: it holds secrets.
func fileToken(data []byte, name string) (string, error) {
	var lines [][]string
	for i, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Fields(l)
		if len(f) != 1 && len(f) != 3 {
			return "", fmt.Errorf("line %d has %d fields: %s", i+1, len(f), tokenFileFormat)
		}
		lines = append(lines, f)
	}
	switch {
	case len(lines) == 0:
		return "", fmt.Errorf("no token in it: %s", tokenFileFormat)
	case len(lines) == 1 && len(lines[0]) == 1:
		if name != "" {
			return "", fmt.Errorf("--token-name %q: the file holds a bare token, with no name", name)
		}
		return lines[0][0], nil
	}
	var names []string
	for _, f := range lines {
		if len(f) != 3 {
			return "", fmt.Errorf("a bare token among named lines: %s", tokenFileFormat)
		}
		if f[0] == name || (name == "" && len(lines) == 1) {
			return f[2], nil
		}
		names = append(names, f[0])
	}
	if name != "" {
		return "", fmt.Errorf("--token-name %q: no such line (the file names %s)", name, strings.Join(names, ", "))
	}
	return "", fmt.Errorf("it holds %d tokens (%s): give --token-name NAME to choose one", len(lines), strings.Join(names, ", "))
}

// maxAdminAnswer bounds an admin API answer read by the commands.
const maxAdminAnswer = 16 << 20

// do sends one request to the admin API path (below /admin/v1/) and returns
// the body of a 2xx answer and its status; other answers become errors
// carrying the problem's detail. what names the command in errors.
func (c *adminClient) do(ctx context.Context, getenv env, what, method, path string, body []byte) ([]byte, int, error) {
	return c.send(ctx, getenv, what, method, admin.Prefix+path, body)
}

// send is do for any path of the server's HTTP listener (/debug/rules,
// which takes the admin tokens too).
func (c *adminClient) send(ctx context.Context, getenv env, what, method, path string, body []byte) ([]byte, int, error) {
	token := getenv(envAdminToken)
	if c.tokenFile != "" {
		b, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: --token-file: %w", what, err)
		}
		if token, err = fileToken(b, c.tokenName); err != nil {
			return nil, 0, fmt.Errorf("%s: --token-file %s: %w", what, c.tokenFile, err)
		}
	}
	if token == "" {
		return nil, 0, fmt.Errorf("%s: no token: set %s or --token-file: %w", what, envAdminToken, errUsage)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.base, "/")+path, bytes.NewReader(body))
	if err != nil {
		return nil, 0, fmt.Errorf("%s: --admin-url: %w", what, err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", what, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, maxAdminAnswer))
	if err != nil {
		return nil, 0, fmt.Errorf("%s: reading the answer: %w", what, err)
	}
	if resp.StatusCode >= 300 {
		var p struct{ Detail string }
		if json.Unmarshal(out, &p) == nil && p.Detail != "" {
			return nil, resp.StatusCode, fmt.Errorf("%s: %s: %s", what, resp.Status, p.Detail)
		}
		return nil, resp.StatusCode, fmt.Errorf("%s: %s", what, resp.Status)
	}
	return out, resp.StatusCode, nil
}

func runQuota(ctx context.Context, args []string, getenv env, stdout, stderr io.Writer) error {
	usage := func(w io.Writer) {
		fmt.Fprintln(w, "Usage: sluice quota set TENANT --tier T [--domain D --override 'DESCRIPTOR=N/UNIT'…]… [--effective-at T] [--expires-at T] [--output table|json]")
		fmt.Fprintln(w, "       sluice quota get TENANT [--output table|json]")
		fmt.Fprintln(w, "       sluice quota rm TENANT")
		fmt.Fprintln(w, "       sluice quota list [--tier T] [--limit N] [--after TENANT] [--output table|json]")
		fmt.Fprintln(w, "       sluice quota reset TENANT       (forget every counter of the tenant: quota back in full)")
		fmt.Fprintln(w, "\nAn override belongs to the --domain given before it: --domain api --override '=7/minute'")
		fmt.Fprintln(w, "--domain billing --override '=5000/month' overrides the rule at the tenant key of both files.")
		fmt.Fprintln(w, "\nTalks to a server's admin API (--admin-url, SLUICE_ADMIN_URL) with the bearer token in")
		fmt.Fprintln(w, "SLUICE_ADMIN_TOKEN or --token-file, and prints its answer as a table (--output json: as it came).")
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		usage(stderr)
		// The flags every action takes; `sluice quota ACTION -h` lists the action's own too.
		common := newFlagSet("quota", stderr)
		new(adminClient).flags(common)
		fmt.Fprintln(stderr, "\nFlags of every action (sluice quota ACTION -h for the action's own):")
		common.PrintDefaults()
		if len(args) == 0 {
			return fmt.Errorf("quota: no action given: %w", errUsage)
		}
		return nil
	}
	action := args[0]
	fs := newFlagSet("quota "+action, stderr)
	var ac adminClient
	ac.flags(fs)
	var tier, effective, expires, after string
	var limit int
	var ovs quotaOverrides
	table := "table" // rm and reset print one line, whatever --output
	output := &table
	if action == "set" || action == "get" || action == "list" {
		output = outputFlag(fs)
	}
	switch action {
	case "set":
		fs.StringVar(&tier, "tier", "", "free, pro, enterprise or custom (required)")
		fs.Var(domainFlag{&ovs}, "domain", "the rule file's domain of the --override flags that follow (required before them); repeatable")
		fs.Var(&ovs, "override", "an override DESCRIPTOR=N/UNIT (UNIT: second…year, or a duration such as 90s) in the --domain before it; repeatable")
		fs.StringVar(&effective, "effective-at", "", "RFC 3339 time the record applies from (default: now)")
		fs.StringVar(&expires, "expires-at", "", "RFC 3339 time the record stops (default: never)")
	case "list":
		fs.StringVar(&tier, "tier", "", "only tenants on this tier")
		fs.IntVar(&limit, "limit", 100, "page size (1–1000)")
		fs.StringVar(&after, "after", "", "start after this tenant (the next of the previous page)")
	case "get", "rm", "reset":
	default:
		usage(stderr)
		return fmt.Errorf("quota: unknown action %q (want set, get, rm, list or reset): %w", action, errUsage)
	}
	fs.Usage = func() { usage(stderr); fmt.Fprintln(stderr, "\nFlags:"); fs.PrintDefaults() }
	// Flags may come before or after the tenant.
	wantPos := 1
	if action == "list" {
		wantPos = 0
	}
	pos, err := parseAdminCommand(fs, args[1:], getenv, wantPos)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if err := checkOutput("quota "+action, *output); err != nil {
		return err
	}
	var method, path string
	var body []byte
	switch action {
	case "set":
		if tier == "" {
			return fmt.Errorf("quota set: --tier is required: %w", errUsage)
		}
		req := admin.QuotaRequest{Tier: tier, Overrides: ovs.list}
		for _, t := range []struct {
			flag, v string
			dst     **time.Time
		}{{"--effective-at", effective, &req.EffectiveAt}, {"--expires-at", expires, &req.ExpiresAt}} {
			if t.v == "" {
				continue
			}
			tm, err := time.Parse(time.RFC3339, t.v)
			if err != nil {
				return fmt.Errorf("quota set: %s: want an RFC 3339 time such as 2027-01-01T00:00:00Z: %w", t.flag, errUsage)
			}
			*t.dst = &tm
		}
		if req.Overrides == nil {
			req.Overrides = []admin.OverrideJSON{}
		}
		body, _ = json.Marshal(req)
		method, path = http.MethodPut, "quotas/"+url.PathEscape(pos[0])
	case "get":
		method, path = http.MethodGet, "quotas/"+url.PathEscape(pos[0])
	case "rm":
		method, path = http.MethodDelete, "quotas/"+url.PathEscape(pos[0])
	case "reset":
		body, _ = json.Marshal(admin.ResetRequest{Tenant: pos[0]})
		method, path = http.MethodPost, "reset"
	case "list":
		q := url.Values{}
		if tier != "" {
			q.Set("tier", tier)
		}
		if after != "" {
			q.Set("after", after)
		}
		q.Set("limit", strconv.Itoa(limit))
		method, path = http.MethodGet, "quotas?"+q.Encode()
	}
	out, status, err := ac.do(ctx, getenv, "quota "+action, method, path, body)
	if err != nil {
		return err
	}
	if status == http.StatusNoContent {
		fmt.Fprintf(stdout, "removed %s\n", pos[0])
		return nil
	}
	if action == "reset" {
		var res admin.ResetJSON
		if err := json.Unmarshal(out, &res); err != nil {
			return fmt.Errorf("quota reset: the answer is not what this version expects: %w", err)
		}
		fmt.Fprintf(stdout, "reset %d counters of %s", res.KeysReset, pos[0])
		if !res.Audited {
			fmt.Fprint(stdout, " (no audit row: the server runs without PostgreSQL, or there was nothing to reset)")
		}
		fmt.Fprintln(stdout)
		if res.More {
			fmt.Fprintln(stdout, "more counters remain: run sluice quota reset again")
		}
		return nil
	}
	if action == "list" {
		return printAnswer(stdout, "quota list", *output, out, quotaListTable)
	}
	return printAnswer(stdout, "quota "+action, *output, out, quotaTable)
}

// quotaTable prints one tenant's record: its tier and times, its overrides,
// and the limit each rule resolves to now with where it comes from.
func quotaTable(w io.Writer, q admin.QuotaJSON) error {
	fmt.Fprintf(w, "tenant %s: tier %s, effective %s, expires %s, updated %s\n", oneLine(q.Tenant), q.Tier,
		q.EffectiveAt.UTC().Format(time.RFC3339), expiry(q.ExpiresAt), q.UpdatedAt.UTC().Format(time.RFC3339))
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	if len(q.Overrides) > 0 {
		fmt.Fprintln(tw, "\nOVERRIDE DOMAIN\tDESCRIPTOR\tLIMIT")
		for _, o := range q.Overrides {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", o.Domain, dash(oneLine(o.Descriptor)), perUnit(int64(o.RequestsPerUnit), o.Unit, o.Window))
		}
	}
	if len(q.Quotas) > 0 {
		fmt.Fprintln(tw, "\nDOMAIN\tRULE\tDESCRIPTOR\tLIMIT\tSOURCE")
		for _, r := range q.Quotas {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Domain, r.Rule, dash(oneLine(r.Descriptor)), perUnit(int64(r.RequestsPerUnit), r.Unit, r.Window), r.Source)
		}
	}
	return tw.Flush()
}

// quotaListTable prints a page of tenants, then how to get the next page.
func quotaListTable(w io.Writer, page admin.ListJSON) error {
	if len(page.Tenants) == 0 {
		fmt.Fprintln(w, "no tenants")
		return nil
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tTIER\tOVERRIDES\tEFFECTIVE\tEXPIRES")
	for _, q := range page.Tenants {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", oneLine(q.Tenant), q.Tier, len(q.Overrides), q.EffectiveAt.UTC().Format(time.RFC3339), expiry(q.ExpiresAt))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if page.Next != "" {
		fmt.Fprintf(w, "more: run again with --after %s\n", page.Next)
	}
	return nil
}

// perUnit writes a limit as N/UNIT, or N/WINDOW for a duration window.
func perUnit(n int64, unit, window string) string {
	if unit == "" {
		unit = window
	}
	return fmt.Sprintf("%d/%s", n, unit)
}

// expiry writes a record's expiry time, or "never".
func expiry(t *time.Time) string {
	if t == nil {
		return "never"
	}
	return t.UTC().Format(time.RFC3339)
}
