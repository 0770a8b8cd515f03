package main

import (
	"net/http/httptest"
	"strings"
	"testing"

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
