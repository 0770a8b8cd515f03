package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestPenaltyEndToEnd: a rule with penalty: 1m keeps a key that went over
// denied after its window turned, with reason penalty in the HTTP JSON
// answer (overall and per status) and the Sluice-Reason header of the
// gRPC answer, and Retry-After the end of the penalty.
func TestPenaltyEndToEnd(t *testing.T) {
	dir := t.TempDir()
	rule := "domain: p\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1, penalty: 1m}\n"
	if err := os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(rule), 0o644); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, dir, func(c *serveConfig) { c.Listen.ResponseHeaders = true })
	ts.clock.Advance(time.Second - time.Duration(ts.clock.Now().UnixNano())%time.Second)
	body := `{"domain":"p","descriptors":[{"entries":[{"key":"user","value":"u1"}]}]}`
	type answer struct {
		Code     string
		Reason   string
		Statuses []struct {
			Code         string
			Reason       string
			RetryAfterMs int64 `json:"retry_after_ms"`
		}
	}
	check := func() answer {
		t.Helper()
		_, out := post(t, ts.base+"/v1/check", body)
		var a answer
		if err := json.Unmarshal([]byte(out), &a); err != nil || len(a.Statuses) != 1 {
			t.Fatalf("/v1/check: %v: %s", err, out)
		}
		return a
	}
	if a := check(); a.Code != "OK" {
		t.Fatalf("first check: %+v, want OK", a)
	}
	if a := check(); a.Code != "OVER_LIMIT" || a.Statuses[0].Reason != "limited" {
		t.Fatalf("second check: %+v, want OVER_LIMIT, limited", a)
	}
	ts.clock.Advance(2 * time.Second) // a new window, but the penalty holds
	a := check()
	if a.Code != "OVER_LIMIT" || a.Reason != "penalty" || a.Statuses[0].Reason != "penalty" {
		t.Errorf("check in the penalty: %+v, want OVER_LIMIT with reason penalty", a)
	}
	if ms := a.Statuses[0].RetryAfterMs; ms != 58_000 {
		t.Errorf("retry_after_ms in the penalty = %d, want 58000 (the penalty's end)", ms)
	}
	resp := ts.should(t, &rlsv3.RateLimitRequest{Domain: "p", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("user", "u1")}})
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("gRPC in the penalty: %v, want OVER_LIMIT", resp.GetOverallCode())
	}
	got := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		got[h.GetKey()] = h.GetValue()
	}
	if got["Sluice-Reason"] != "penalty" || got["Retry-After"] != "58" {
		t.Errorf("gRPC response headers %v, want Sluice-Reason: penalty and Retry-After: 58", got)
	}
	ts.clock.Advance(58 * time.Second)
	if a := check(); a.Code != "OK" {
		t.Errorf("after the penalty: %+v, want OK", a)
	}
}

// TestDenyListEndToEnd: a rule file's deny list refuses matching requests
// with reason deny_list over HTTP and gRPC, and is reloaded like rules.
func TestDenyListEndToEnd(t *testing.T) {
	dir := t.TempDir()
	rule := "domain: e\ndeny:\n  - {key: ip, cidr: 203.0.113.0/24}\ndescriptors:\n  - key: ip\n    rate_limit: {unit: hour, requests_per_unit: 100}\n"
	if err := os.WriteFile(filepath.Join(dir, "e.yaml"), []byte(rule), 0o644); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, dir, func(c *serveConfig) { c.Listen.ResponseHeaders = true })
	code, out := post(t, ts.base+"/v1/check", `{"domain":"e","descriptors":[{"entries":[{"key":"ip","value":"203.0.113.9"}]}]}`)
	var a struct {
		Code, Reason string
	}
	if err := json.Unmarshal([]byte(out), &a); err != nil || a.Code != "OVER_LIMIT" || a.Reason != "deny_list" {
		t.Errorf("/v1/check of a listed address: %d %s, want OVER_LIMIT with reason deny_list", code, out)
	}
	resp := ts.should(t, &rlsv3.RateLimitRequest{Domain: "e", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("ip", "203.0.113.10")}})
	got := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		got[h.GetKey()] = h.GetValue()
	}
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || got["Sluice-Reason"] != "deny_list" || got["Retry-After"] != "" {
		t.Errorf("gRPC for a listed address: %v %v, want OVER_LIMIT, Sluice-Reason: deny_list, no Retry-After", resp.GetOverallCode(), got)
	}
	// The list is reloaded with the rules.
	if err := os.WriteFile(filepath.Join(dir, "e.yaml"), []byte(strings.Replace(rule, "203.0.113.0/24", "198.51.100.0/24", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the new deny list", func() bool {
		_, out := post(t, ts.base+"/v1/check", `{"domain":"e","descriptors":[{"entries":[{"key":"ip","value":"203.0.113.9"}]}]}`)
		return strings.Contains(out, `"code":"OK"`)
	})
}
