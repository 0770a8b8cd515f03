package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/server/admin"
	"github.com/sluice-rl/sluice/server/dashboard"
)

const dashRO = "viewer-token-0123456789"

// adminGet is GET with a bearer token (none when tok is empty).
func adminGet(t *testing.T, url, tok string, v any) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if v != nil && resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
	}
	return resp.StatusCode
}

// TestDashboardFleetOnRedis: two servers on one Redis with a read-only
// admin token; the dashboard needs the token, and /admin/v1/top on either
// server shows the denials of both.
func TestDashboardFleetOnRedis(t *testing.T) {
	t.Parallel() // its own Redis and servers
	rd := redistest.Start(t)
	tokFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokFile, []byte("viewer ro "+dashRO+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	edit := withRedis(rd.URL(), func(c *serveConfig) { c.Tenants.AdminTokenFile = tokFile })
	a := startServer(t, filepath.Join(repoRoot, "testdata/rules/failure"), edit)
	b := startServer(t, filepath.Join(repoRoot, "testdata/rules/failure"), edit)

	if code := adminGet(t, a.base+"/dashboard/", "", nil); code != http.StatusUnauthorized {
		t.Errorf("/dashboard/ without a token = %d, want 401", code)
	}
	if code := adminGet(t, a.base+"/dashboard/", dashRO, nil); code != http.StatusOK {
		t.Errorf("/dashboard/ with a read-only token = %d, want 200", code)
	}
	// The "closed" rule of testdata/rules/failure admits few per window.
	for range 20 {
		checkJSON(t, a, "closed")
		checkJSON(t, b, "closed")
	}
	if a.server.dash == nil || b.server.dash == nil {
		t.Fatal("an admin token is configured but a server has no dashboard")
	}
	// Each server publishes its snapshot every two seconds.
	var denials uint64
	waitUntil(t, "a's top list to include b's denials", 10*time.Second, func() bool {
		var top dashboard.TopResponse
		adminGet(t, a.base+"/admin/v1/top?domain=failure&n=5", dashRO, &top)
		denials = 0
		for _, r := range top.Rules {
			for _, o := range r.TopDenied {
				if strings.HasPrefix(o.Key, "closed=") {
					denials += o.Denials
				}
			}
		}
		return len(top.Instances) == 2 && denials == 38
	})
	// sluice top prints the same, from either server.
	var out, errOut bytes.Buffer
	getenv := func(k string) string {
		if k == envAdminToken {
			return dashRO
		}
		return ""
	}
	if err := run(context.Background(), []string{"top", "--admin-url", b.base, "--domain", "failure"}, getenv, &out, &errOut); err != nil {
		t.Fatalf("sluice top: %v\n%s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "2 instance(s)") || !regexp.MustCompile(`(?m)^\s+38\s+40\s+closed=v$`).MatchString(out.String()) {
		t.Errorf("sluice top printed:\n%s\nwant 2 instances and closed=v with 38 denied of 40 checked", out.String())
	}
	var st dashboard.Stats
	adminGet(t, a.base+"/admin/v1/stats", dashRO, &st)
	var deniedCount float64
	for _, d := range st.Decisions {
		if d.Outcome == "denied" {
			deniedCount += d.Count
		}
	}
	if denials != 38 || deniedCount != 38 {
		t.Errorf("fleet: top denials of closed=v %d, denied decisions %v; want 38 and 38 (40 checks, 2 admitted)", denials, deniedCount)
	}
	if len(st.Breakers) != 1 || st.Breakers[0].Node != rd.Addr() {
		t.Errorf("breakers = %+v, want one node %s", st.Breakers, rd.Addr())
	}
}

func TestPrintUsage(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	u := admin.UsageJSON{Tenant: "acme", Skipped: 1, Truncated: []string{"api/api_key.user"}, Limits: []admin.LimitJSON{
		{Domain: "api", Rule: "api_key.endpoint", Descriptor: "endpoint:POST /orders", Unit: "minute", Limit: 500, Used: 120, Remaining: 380, Reset: now.Add(42 * time.Second)},
		{Domain: "api", Rule: "api_key", Window: "720h0m0s", Limit: 1000000, Used: 0, Remaining: 1000000, Reset: now, Degraded: "failed_open"},
		{Domain: "api", Rule: "api_key.user", Descriptor: "user", Counter: "user:alice", Unit: "minute", Limit: 5, Used: 2, Remaining: 3, Reset: now.Add(time.Minute)},
	}}
	var b bytes.Buffer
	if err := printUsage(&b, u, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"tenant acme", "500/minute", "120", "380", "42s", "1000000/720h0m0s", "now (failed_open)", "1 rule(s) counted per value", "user:alice", "api/api_key.user has more counters than listed (100)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("printUsage output lacks %q:\n%s", want, b.String())
		}
	}
}

// TestDeployFilesNameRealMetrics: every sluice_* metric the Grafana
// dashboard and the alert rules use is one `sluice serve` exports (on
// Redis; the tenant metrics need --postgres-url and appear with tenant
// traffic, so they are checked against the code that defines them).
func TestDeployFilesNameRealMetrics(t *testing.T) {
	rd := redistest.Start(t)
	ts := startServer(t, filepath.Join(repoRoot, "testdata/rules/failure"), withRedis(rd.URL(), nil))
	checkJSON(t, ts, "open")
	_, body := get(t, ts.base+"/metrics")
	exported := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (sluice_[a-z_]+) `).FindAllStringSubmatch(body, -1) {
		exported[m[1]] = true
	}
	var tenantsSrc []byte
	for _, f := range []string{"cmd/sluice/tenants.go", "service/promstats/promstats.go"} {
		b, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		tenantsSrc = append(tenantsSrc, b...)
	}
	for _, f := range []string{"deploy/grafana/sluice.json", "deploy/prometheus/alerts.yml"} {
		b, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range regexp.MustCompile(`sluice_[a-z_]+`).FindAllString(string(b), -1) {
			base := strings.TrimSuffix(name, "_bucket")
			if exported[base] {
				continue
			}
			if (strings.HasPrefix(name, "sluice_tenants_") || name == "sluice_tier_decisions_total") && strings.Contains(string(tenantsSrc), `"`+name+`"`) {
				continue
			}
			t.Errorf("%s uses %s, which sluice serve does not export", f, name)
		}
	}
}

// cancelAfter is stdout for a watching command: it cancels the command's
// context once n refreshes (lines containing mark) were written.
type cancelAfter struct {
	bytes.Buffer
	mark   string
	n      int
	cancel context.CancelFunc
}

func (c *cancelAfter) Write(p []byte) (int, error) {
	n, err := c.Buffer.Write(p)
	if strings.Count(c.String(), c.mark) >= c.n {
		c.cancel()
	}
	return n, err
}

// TestTopWatch: sluice top --watch against a real server prints the top
// list again every --interval until its context ends (an interrupt: exit
// status 0), each refresh whole and, not on a terminal, without clearing
// the screen; with --output json each refresh is one JSON document.
func TestTopWatch(t *testing.T) {
	tokFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokFile, []byte("viewer ro "+dashRO+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := startServer(t, filepath.Join(repoRoot, "testdata/rules/failure"), func(c *serveConfig) { c.Tenants.AdminTokenFile = tokFile })
	getenv := func(k string) string {
		if k == envAdminToken {
			return dashRO
		}
		return ""
	}
	for _, tc := range []struct {
		name, output, mark string
	}{
		{"table", "table", "instance(s)"},
		{"json", "json", `"window"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const refreshes = 3
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			out := &cancelAfter{mark: tc.mark, n: refreshes, cancel: cancel}
			var errOut bytes.Buffer
			err := run(ctx, []string{"top", "--admin-url", a.base, "--watch", "--interval", "10ms", "--output", tc.output}, getenv, out, &errOut)
			if err != nil {
				t.Fatalf("sluice top --watch: %v, want nil once interrupted\n%s", err, errOut.String())
			}
			if got := strings.Count(out.String(), tc.mark); got != refreshes {
				t.Errorf("sluice top --watch printed %d refreshes, want %d:\n%s", got, refreshes, out.String())
			}
			if strings.Contains(out.String(), clearScreen) {
				t.Errorf("sluice top --watch cleared the screen of a non-terminal:\n%q", out.String())
			}
			if errOut.Len() > 0 {
				t.Errorf("sluice top --watch wrote to stderr: %s", errOut.String())
			}
			if tc.output == "json" {
				dec := json.NewDecoder(strings.NewReader(out.String()))
				for i := range refreshes {
					var top dashboard.TopResponse
					if err := dec.Decode(&top); err != nil || top.Window == "" {
						t.Errorf("refresh %d is not a top answer: %v", i, err)
					}
				}
			} else if got := regexp.MustCompile(`(?m)^\d\d:\d\d:\d\d \(every 10ms\)$`).FindAllString(out.String(), -1); len(got) != refreshes {
				t.Errorf("sluice top --watch printed %d time lines, want %d:\n%s", len(got), refreshes, out.String())
			}
		})
	}
	if err := run(context.Background(), []string{"top", "--admin-url", a.base, "--watch", "--interval", "0s"}, getenv, io.Discard, io.Discard); !errors.Is(err, errUsage) {
		t.Errorf("sluice top --watch --interval 0s: %v, want a usage error", err)
	}
}
