package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/internal/pgtest"
	"github.com/sluice-rl/sluice/server/admin"
	"github.com/sluice-rl/sluice/tenant/pg"
)

// TestSwitchLevels: kill switches of a domain and of every rule, set with
// sluice switch through one server, reach a second server over PostgreSQL
// (LISTEN/NOTIFY); the strongest switch over a rule applies; clearing
// them enforces the same counters again; every change has an audit row.
func TestSwitchLevels(t *testing.T) {
	t.Parallel() // its own server and processes; it mostly waits for them
	pgs := pgtest.Start(t)
	url := pgs.NewDatabase(t)
	envs := map[string]string{"SLUICE_POSTGRES_URL": url}
	if out, err := sluiceCmd(t, envs, "migrate"); err != nil {
		t.Fatalf("sluice migrate: %v\n%s", err, out)
	}
	dir := t.TempDir()
	for _, d := range []string{"pay", "feed"} {
		body := "domain: " + d + "\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"
		if err := os.WriteFile(filepath.Join(dir, d+".yaml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tokFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokFile, []byte("ops rw "+e2eRW+"\nviewer ro "+e2eRO+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	edit := func(c *serveConfig) {
		c.Tenants.PostgresURL, c.Tenants.AdminTokenFile, c.Tenants.Resync = url, tokFile, time.Hour
	}
	a := startServer(t, dir, edit)
	b := startServer(t, dir, edit)
	for _, s := range []*testServer{a, b} {
		waitUntil(t, "tenants live", 10*time.Second, func() bool {
			_, body := get(t, s.base+"/readyz")
			return strings.Contains(body, `tenants: {"source":"live","stale":false`)
		})
	}
	// hits sends n hits of domain to b and counts the allowed ones.
	hits := func(domain string, n int) int {
		ok := 0
		for range n {
			resp := b.should(t, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("k", "v")}})
			if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
				ok++
			}
		}
		return ok
	}
	if got := hits("pay", 3) + hits("feed", 3); got != 2 {
		t.Fatalf("before any switch: %d of 6 allowed, want 2 (1 per domain)", got)
	}
	cmd := map[string]string{"SLUICE_ADMIN_TOKEN": e2eRW, "SLUICE_ADMIN_URL": a.base}

	// The domain switch: pay is not enforced, feed still is.
	out, err := sluiceCmd(t, cmd, "switch", "set", "--domain", "pay", "--state", "off")
	if err != nil || !strings.Contains(out, "domain") || !strings.Contains(out, "off") {
		t.Fatalf("sluice switch set --domain pay: %v\n%s", err, out)
	}
	took := waitUntil(t, "server b ignores domain pay", 10*time.Second, func() bool { return hits("pay", 1) == 1 })
	t.Logf("a domain switch set on server a applied on server b after %v", took)
	if got := hits("pay", 10); got != 10 {
		t.Errorf("pay switched off: %d of 10 allowed, want 10", got)
	}
	if got := hits("feed", 5); got != 0 {
		t.Errorf("feed (not switched): %d of 5 allowed, want 0 (its quota is used)", got)
	}

	// The global switch in shadow mode: feed counts but never denies; pay
	// stays off (off is stronger than shadow).
	out, err = sluiceCmd(t, cmd, "switch", "set", "--global", "--state", "shadow", "--output", "json")
	var set admin.SwitchJSON
	// stdout is the answer; the note on stderr follows it here.
	if err != nil || json.NewDecoder(strings.NewReader(out)).Decode(&set) != nil || set.Scope != "global" || set.State != "shadow" || !strings.Contains(out, "in force on this instance") {
		t.Fatalf("sluice switch set --global: %v\n%s", err, out)
	}
	took = waitUntil(t, "server b shadows feed", 10*time.Second, func() bool { return hits("feed", 1) == 1 })
	t.Logf("the global switch set on server a applied on server b after %v", took)
	if got := hits("feed", 10); got != 10 {
		t.Errorf("feed under the global shadow switch: %d of 10 allowed, want 10", got)
	}
	_, body := adminDo(t, "GET", b.base+"/debug/rules", e2eRO, "") // a read token: /debug/rules is guarded on the HTTP listener
	if !strings.Contains(body, `"domain":"pay","id":"k"`) || strings.Count(body, `"switch":"off"`) != 1 || strings.Count(body, `"switch":"shadow"`) != 1 {
		t.Errorf("/debug/rules on b = %s, want pay's rule off and feed's shadow", body)
	}

	// sluice switch list, both outputs.
	out, err = sluiceCmd(t, cmd, "switch", "list", "--output", "json")
	var list struct{ Switches []admin.SwitchJSON }
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list.Switches) != 2 {
		t.Fatalf("sluice switch list --output json: %v\n%s", err, out)
	}
	if s := list.Switches[0]; s.Scope != "global" || s.State != "shadow" || s.UpdatedAt == nil {
		t.Errorf("first switch = %+v, want the global shadow switch", s)
	}
	if s := list.Switches[1]; s.Scope != "domain" || s.Domain != "pay" || s.State != "off" {
		t.Errorf("second switch = %+v, want domain pay off", s)
	}
	out, err = sluiceCmd(t, cmd, "switch", "list")
	if err != nil || !strings.Contains(out, "SCOPE") || !strings.Contains(out, "global") || !strings.Contains(out, "pay") {
		t.Errorf("sluice switch list: %v\n%s", err, out)
	}

	// Refused: a read-only token, an unknown domain, a bad scope.
	ro := map[string]string{"SLUICE_ADMIN_TOKEN": e2eRO, "SLUICE_ADMIN_URL": a.base}
	if out, err := sluiceCmd(t, ro, "switch", "clear", "--global"); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("clear with a read-only token: %v %s, want 403", err, out)
	}
	if out, err := sluiceCmd(t, cmd, "switch", "set", "--domain", "nope", "--state", "off"); err == nil || !strings.Contains(err.Error(), `no rule file has domain "nope"`) {
		t.Errorf("switch of an unknown domain: %v %s, want an error naming it", err, out)
	}
	if code, body := adminDo(t, "PUT", a.base+"/admin/v1/switches", e2eRW, `{"scope":"global","domain":"pay","state":"off"}`); code != 400 || !strings.Contains(body, "domain") {
		t.Errorf("global switch with a domain: %d %s, want 400 naming domain", code, body)
	}

	// Cleared: the same counters enforce again (their quota is used).
	for _, args := range [][]string{{"switch", "clear", "--global"}, {"switch", "clear", "--domain", "pay"}} {
		if out, err := sluiceCmd(t, cmd, args...); err != nil {
			t.Fatalf("sluice %v: %v\n%s", args, err, out)
		}
	}
	waitUntil(t, "server b enforces again", 10*time.Second, func() bool { return hits("pay", 1) == 0 && hits("feed", 1) == 0 })

	// Every change is audited.
	st, err := pg.Open(pg.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, c := range []struct {
		subject string
		n       int
	}{{"domain:pay", 2}, {"global", 2}} {
		rows, err := st.AuditLog(context.Background(), c.subject, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != c.n {
			t.Errorf("audit rows of %s: %d, want %d", c.subject, len(rows), c.n)
			continue
		}
		if rows[0].Actor != "ops" || rows[0].Action != "switch" {
			t.Errorf("audit row of %s = %+v, want actor ops, action switch", c.subject, rows[0])
		}
	}
}

// TestSwitchSetInForce: sluice switch set and clear return once the change
// is in force on the instance that took it. Put-then-check rounds on that
// instance, a check sent the moment the command returns, see the new state
// every time (the old command returned on the database's commit, and the
// old state answered 4 of 12 rounds).
func TestSwitchSetInForce(t *testing.T) {
	t.Parallel() // its own server and processes; it mostly waits for them
	pgs := pgtest.Start(t)
	url := pgs.NewDatabase(t)
	if out, err := sluiceCmd(t, map[string]string{"SLUICE_POSTGRES_URL": url}, "migrate"); err != nil {
		t.Fatalf("sluice migrate: %v\n%s", err, out)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "pay.yaml"), []byte("domain: pay\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tokFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokFile, []byte("ops rw "+e2eRW+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := startServer(t, dir, func(c *serveConfig) {
		c.Tenants.PostgresURL, c.Tenants.AdminTokenFile, c.Tenants.Resync = url, tokFile, time.Hour
	})
	waitUntil(t, "tenants live", 10*time.Second, func() bool {
		_, body := get(t, a.base+"/readyz")
		return strings.Contains(body, `tenants: {"source":"live","stale":false`)
	})
	allowed := func() bool {
		resp := a.should(t, &rlsv3.RateLimitRequest{Domain: "pay", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("k", "v")}})
		return resp.GetOverallCode() == rlsv3.RateLimitResponse_OK
	}
	allowed() // the hour's one hit: from now on only a switch lets a check through
	if allowed() {
		t.Fatal("the second hit of a 1/hour rule was allowed, want it over the limit")
	}
	cmd := map[string]string{"SLUICE_ADMIN_TOKEN": e2eRW, "SLUICE_ADMIN_URL": a.base}
	const rounds = 12
	stale := 0
	for i := range rounds {
		args, want := []string{"switch", "set", "--domain", "pay", "--state", "off"}, true
		if i%2 == 1 {
			args, want = []string{"switch", "clear", "--domain", "pay"}, false
		}
		out, err := sluiceCmd(t, cmd, args...)
		if err != nil {
			t.Fatalf("round %d: sluice %v: %v\n%s", i, args, err, out)
		}
		if !strings.Contains(out, "in force on this instance; other instances follow") {
			t.Errorf("round %d: sluice %v printed %q, want it to say the change is in force on this instance", i, args, out)
		}
		if got := allowed(); got != want {
			stale++
			t.Errorf("round %d: after sluice %v a check was allowed=%v, want %v (the old state answered)", i, args, got, want)
		}
	}
	t.Logf("%d of %d put-then-check rounds answered by the old state", stale, rounds)

	// A --wait too short for the instance to follow says so and fails.
	if out, err := sluiceCmd(t, cmd, "switch", "set", "--domain", "pay", "--state", "shadow", "--wait", "1ns"); err == nil || !strings.Contains(err.Error(), "not yet in force") {
		t.Errorf("sluice switch set --wait 1ns: %v\n%s, want an error saying it is not yet in force", err, out)
	}
}
