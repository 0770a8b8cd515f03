package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/rules"
)

// metricLine returns the value of the exposition line starting with
// series on /metrics, or "" if there is none.
func metricLine(t *testing.T, base, series string) string {
	t.Helper()
	_, body := get(t, base+"/metrics")
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			return v
		}
	}
	return ""
}

// TestGuardedReload: a rule directory that briefly lacks a domain (a file
// removed, files written one by one) does not unenforce it: the reload is
// held, the domain's counters keep denying, the metric and /debug/rules
// say why; a confirming marker file applies the removal.
func TestGuardedReload(t *testing.T) {
	t.Parallel() // its own server and processes; it mostly waits for them
	dir := t.TempDir()
	file := func(domain string, rpu int) string {
		return "domain: " + domain + "\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: hour\n      requests_per_unit: " + itoa(rpu) + "\n"
	}
	for _, f := range []struct {
		name string
		rpu  int
	}{{"keep", 100}, {"guarded", 3}} {
		if err := os.WriteFile(filepath.Join(dir, f.name+".yaml"), []byte(file(f.name, f.rpu)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ts := startServer(t, dir, nil)
	hit := func(domain string) rlsv3.RateLimitResponse_Code {
		return ts.should(t, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("k", "v")}}).GetOverallCode()
	}
	heldMetric := `sluice_rules_reload_held{reason="domain_removed"}`
	if got := metricLine(t, ts.base, heldMetric); got != "0" {
		t.Fatalf("%s = %q at start, want 0", heldMetric, got)
	}
	if got := hit("guarded"); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("first hit = %v, want OK", got)
	}

	if err := os.Remove(filepath.Join(dir, "guarded.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, heldMetric+" = 1", func() bool { return metricLine(t, ts.base, heldMetric) == "1" })
	if got := metricLine(t, ts.base, `sluice_rules_reload_held_total{reason="domain_removed"}`); got == "0" || got == "" {
		t.Errorf("sluice_rules_reload_held_total = %q, want at least 1", got)
	}
	_, body := get(t, "http://"+ts.debugLn.Addr().String()+"/debug/rules")
	var dbg struct {
		Held *rules.Hold `json:"held"`
	}
	if err := json.Unmarshal([]byte(body), &dbg); err != nil {
		t.Fatalf("/debug/rules: %v", err)
	}
	if dbg.Held == nil || strings.Join(dbg.Held.Domains, ",") != "guarded" || strings.Join(dbg.Held.Reasons, ",") != rules.HoldDomainRemoved {
		t.Errorf("/debug/rules held = %+v, want domain guarded, reason %s", dbg.Held, rules.HoldDomainRemoved)
	}
	// The held domain's counters keep enforcing: of 10 more hits, exactly
	// 2 fit the quota of 3.
	allowed, denied := 0, 0
	for range 10 {
		if hit("guarded") == rlsv3.RateLimitResponse_OK {
			allowed++
		} else {
			denied++
		}
	}
	if allowed != 2 || denied != 8 {
		t.Errorf("while held: %d allowed, %d denied, want 2 and 8", allowed, denied)
	}
	if code, _ := get(t, ts.base+"/readyz"); code != 200 {
		t.Errorf("/readyz while held = %d, want 200 (a hold is not a failure)", code)
	}

	// The file comes back (a ConfigMap written file by file): the hold ends.
	if err := os.WriteFile(filepath.Join(dir, "guarded.yaml"), []byte(file("guarded", 3)), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, heldMetric+" back to 0", func() bool { return metricLine(t, ts.base, heldMetric) == "0" })
	if got := hit("guarded"); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("after the file came back: %v, want OVER_LIMIT (the same counters)", got)
	}

	// Removed again and confirmed by the marker file: applied.
	if err := os.Remove(filepath.Join(dir, "guarded.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, heldMetric+" = 1 again", func() bool { return metricLine(t, ts.base, heldMetric) == "1" })
	if err := os.WriteFile(filepath.Join(dir, rules.AllowRemovalFile), []byte("guarded\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the confirmed removal applied", func() bool {
		return hit("guarded") == rlsv3.RateLimitResponse_OK && metricLine(t, ts.base, heldMetric) == "0"
	})
	if _, body := get(t, "http://"+ts.debugLn.Addr().String()+"/debug/rules"); strings.Contains(body, `"held"`) {
		t.Errorf("/debug/rules after the confirmed removal still says held: %s", body)
	}
	if !strings.Contains(ts.logs.String(), "rules reloaded with removals") {
		t.Error("no log of the applied removal")
	}
}

// TestGuardedReloadRuleInUse: a rule matched lately is not removed by a
// reload while it is in use, and a rule nobody matched is removed at once.
func TestGuardedReloadRuleInUse(t *testing.T) {
	t.Parallel() // its own server and processes; it mostly waits for them
	dir := t.TempDir()
	two := "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1}\n  - key: b\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"
	if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(two), 0o644); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, dir, nil)
	hit := func(key string) rlsv3.RateLimitResponse_Code {
		return ts.should(t, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor(key, "v")}}).GetOverallCode()
	}
	hit("b") // b is in use; a is not
	oneA := "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"
	if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(oneA), 0o644); err != nil {
		t.Fatal(err)
	}
	series := `sluice_rules_reload_held{reason="rule_in_use"}`
	eventually(t, series+" = 1", func() bool { return metricLine(t, ts.base, series) == "1" })
	if got := hit("b"); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("rule b while its removal is held: %v, want OVER_LIMIT", got)
	}
	// Removing a rule nobody used is not held.
	oneB := "domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"
	if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(oneB), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the removal of idle rule a applied", func() bool { return metricLine(t, ts.base, series) == "0" })
	if got := hit("a"); got != rlsv3.RateLimitResponse_OK {
		t.Errorf("rule a after its removal: %v, want OK (no rule)", got)
	}
}

// TestReadyzFailOnReloadError: with --readyz-fail-on-reload-error, /readyz
// fails while the files do not load, and recovers when they do.
func TestReadyzFailOnReloadError(t *testing.T) {
	t.Parallel() // its own server and processes; it mostly waits for them
	dir := t.TempDir()
	good := "domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"
	if err := os.WriteFile(filepath.Join(dir, "r.yaml"), []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, fail := range []bool{false, true} {
		ts := startServer(t, dir, func(c *serveConfig) { c.Rules.Guard.FailReady = fail })
		if code, body := get(t, ts.base+"/readyz"); code != 200 {
			t.Fatalf("fail=%v: /readyz at start = %d %s, want 200", fail, code, body)
		}
		if err := os.WriteFile(filepath.Join(dir, "r.yaml"), []byte(good+"  - key: x\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the failed reload", func() bool { return ts.watcher.LastError() != nil })
		want := 200
		if fail {
			want = 503
		}
		if code, body := get(t, ts.base+"/readyz"); code != want {
			t.Errorf("fail=%v: /readyz after a failed reload = %d %s, want %d", fail, code, body, want)
		}
		if err := os.WriteFile(filepath.Join(dir, "r.yaml"), []byte(good), 0o644); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the fixed reload", func() bool { return ts.watcher.LastError() == nil })
		if code, body := get(t, ts.base+"/readyz"); code != 200 {
			t.Errorf("fail=%v: /readyz after the fix = %d %s, want 200", fail, code, body)
		}
		ts.stop()
	}
}
