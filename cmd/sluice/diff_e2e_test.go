package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/service"
)

// TestDiffAgainstServer: a running server samples its checks; sluice diff
// replays them against new rules and reports, per domain, the decisions
// that would change, without charging anything on the server.
func TestDiffAgainstServer(t *testing.T) {
	dir := t.TempDir()
	old := "domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 2}\n  - key: ip\n    rate_limit: {unit: hour, requests_per_unit: 100}\n  - key: bot\n    rate_limit: {unlimited: true}\n"
	if err := os.WriteFile(filepath.Join(dir, "shop.yaml"), []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	tokFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokFile, []byte("ops rw "+e2eRW+"\nviewer ro "+e2eRO+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, dir, func(c *serveConfig) {
		c.Tenants.AdminTokenFile = tokFile
		c.Service.SampleSize, c.Service.SampleEvery = 100, 1
	})
	send := func(key string, n int) {
		for range n {
			ts.should(t, &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor(key, "v")}})
		}
	}
	send("user", 5) // 2 allowed, 3 denied
	send("ip", 4)
	send("bot", 3)
	send("other", 1)

	next := t.TempDir()
	// user loses its rule, ip gets a new limit, bot becomes limited.
	newRules := "domain: shop\ndescriptors:\n  - key: ip\n    rate_limit: {unit: hour, requests_per_unit: 10}\n  - key: bot\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"
	if err := os.WriteFile(filepath.Join(next, "shop.yaml"), []byte(newRules), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"SLUICE_ADMIN_TOKEN": e2eRO}
	out, err := sluiceCmd(t, env, "diff", "--against", ts.base, "--rules", next, "--output", "json")
	if err != nil {
		t.Fatalf("sluice diff: %v\n%s", err, out)
	}
	var rep service.PreviewReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("sluice diff --output json: %v\n%s", err, out)
	}
	if rep.Requests != 13 || len(rep.Domains) != 1 {
		t.Fatalf("report: %d requests, %d domains, want 13 and 1:\n%s", rep.Requests, len(rep.Domains), out)
	}
	d := rep.Domains[0]
	if d.NewlyUnlimited != 5 || d.DeniedNowUnlimited != 3 || d.LimitChanged != 4 || d.NewlyLimited != 3 || d.Unchanged != 1 {
		t.Errorf("shop: %+v, want 5 newly unlimited (3 of them denied), 4 limit changed, 3 newly limited, 1 unchanged", d)
	}

	// The table names the moves.
	out, err = sluiceCmd(t, env, "diff", "--against", ts.base, "--rules", next)
	if err != nil || !strings.Contains(out, "user [2/1h0m0s fixed_window] → no rule") || !strings.Contains(out, "newly_unlimited") {
		t.Errorf("sluice diff (table): %v\n%s", err, out)
	}
	// Replaying charged nothing: user still has its 2 hits used, not more.
	resp := ts.should(t, &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*ratelimitv3.RateLimitDescriptor{withLook(descriptor("ip", "v"))}})
	if got := resp.GetStatuses()[0].GetLimitRemaining(); got != 96 {
		t.Errorf("ip remaining after the diff = %d, want 96 (4 hits, none from the replay)", got)
	}

	// Bad input changes nothing and names the field.
	if _, err := sluiceCmd(t, env, "diff", "--against", ts.base); err == nil || !strings.Contains(err.Error(), "--rules") {
		t.Errorf("diff without --rules: %v, want an error naming --rules", err)
	}
	if _, err := sluiceCmd(t, map[string]string{}, "diff", "--against", ts.base, "--rules", next); err == nil || !strings.Contains(err.Error(), "token") {
		t.Errorf("diff without a token: %v, want an error about the token", err)
	}
	if code, _ := adminDo(t, "GET", ts.base+"/admin/v1/sample", "", ""); code != 401 {
		t.Errorf("GET /admin/v1/sample without a token: %d, want 401", code)
	}
}
