package main

import (
	"bytes"
	"context"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-rl/sluice/rules"
)

// TestRuleLabelsHidesDetailedValues: the HTTP listener's /metrics keeps the
// series of rule IDs and overrides and drops those labelled with request
// values (detailed_metric), which may be API keys.
func TestRuleLabelsHidesDetailedValues(t *testing.T) {
	snap, err := rules.Parse("api.yaml", []byte("domain: api\ndescriptors:\n  - key: api_key\n    detailed_metric: true\n    rate_limit: {unit: second, requests_per_unit: 5}\n"), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	dec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_decisions_total", Help: "x"}, []string{"domain", "rule", "outcome"})
	other := prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_other_total", Help: "x"})
	reg.MustRegister(dec, other)
	dec.WithLabelValues("api", "api_key", "allowed").Inc()
	dec.WithLabelValues("api", "override", "allowed").Inc()
	dec.WithLabelValues("api", "api_key=sk_live_secret", "allowed").Inc()
	dec.WithLabelValues("other", "api_key", "allowed").Inc() // a rule ID of another domain
	other.Inc()
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(ruleLabels{reg, func() *rules.Snapshot { return snap }}, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	out := rec.Body.String()
	for _, want := range []string{`rule="api_key"`, `rule="override"`, "sluice_other_total 1"} {
		if !strings.Contains(out, want) {
			t.Errorf("filtered metrics lack %s:\n%s", want, out)
		}
	}
	for _, hidden := range []string{"sk_live_secret", `domain="other"`} {
		if strings.Contains(out, hidden) {
			t.Errorf("filtered metrics show %s:\n%s", hidden, out)
		}
	}
}

// TestGuardFlagsDocumented: every flag of the admin guards and readiness
// is in sluice serve --help and in docs/operations.md.
func TestGuardFlagsDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs/operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	_ = run(context.Background(), []string{"serve", "--help"}, func(string) string { return "" }, &out, &errOut)
	help := out.String() + errOut.String()
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	var g guardConfig
	g.flags(fs)
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		n++
		if !strings.Contains(help, "  -"+f.Name) {
			t.Errorf("sluice serve --help lacks -%s", f.Name)
		}
		if !strings.Contains(string(doc), "--"+f.Name) {
			t.Errorf("docs/operations.md lacks --%s", f.Name)
		}
	})
	if n != 4 {
		t.Errorf("%d guard flags, want 4", n)
	}
}

// TestAuthFailuresEndToEnd: against a running server, wrong tokens are
// answered 401 up to --auth-failure-limit, then 429 with Retry-After;
// sluice_auth_failures_total counts them; the log has one line for them,
// without the token.
func TestAuthFailuresEndToEnd(t *testing.T) {
	tokFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokFile, []byte("ops rw "+csrfRW+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, filepath.Join(repoRoot, "testdata/rules/failure"), func(c *serveConfig) {
		c.Tenants.AdminTokenFile = tokFile
		c.Guard.AuthFailureLimit = 3
	})
	const wrong = "wrong-token-0123456789abcdef"
	for i := range 3 {
		if code, _ := adminDo(t, "GET", s.base+"/admin/v1/switches", wrong, ""); code != 401 {
			t.Fatalf("wrong token #%d: %d, want 401", i+1, code)
		}
	}
	req, _ := http.NewRequest("GET", s.base+"/admin/v1/switches", nil)
	req.Header.Set("Authorization", "Bearer "+wrong)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("wrong token #4: %d Retry-After %q, want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	_, metrics := get(t, "http://"+s.debugLn.Addr().String()+"/metrics")
	for _, want := range []string{`sluice_auth_failures_total{reason="invalid"} 3`, `sluice_auth_failures_total{reason="throttled"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	logs := s.logs.String()
	if got := strings.Count(logs, "admin authentication failed"); got != 1 || strings.Contains(logs, wrong) {
		t.Errorf("%d log lines about failures (want 1), or the log holds the token:\n%s", got, logs)
	}
}

// TestPrintDecisionDenialShowsNoRemaining: sluice check prints no
// "remaining 0" for a denial (envoy's 0 is not what is left: a cost above
// the limit's capacity takes nothing), and prints RateLimit, which says.
func TestPrintDecisionDenialShowsNoRemaining(t *testing.T) {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
		Code:         rlsv3.RateLimitResponse_OVER_LIMIT,
		CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 3, Unit: rlsv3.RateLimitResponse_RateLimit_HOUR},
	}}, ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "RateLimit", Value: `"remote_address";r=3;t=0`}}}
	var b bytes.Buffer
	printDecision(&b, resp)
	if strings.Contains(b.String(), "remaining 0") || !strings.Contains(b.String(), "r=3") {
		t.Errorf("printDecision:\n%s\nwant no remaining 0 on the denial, and RateLimit's r=3", b.String())
	}
}
