package main

import (
	"context"
	"encoding/json"
	"fmt"
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

// TestDenyE2E: a deny entry added with sluice deny through one server is
// enforced by a second server sharing PostgreSQL (an address range: the
// addresses in it denied, the others admitted); sluice deny rm restores
// admission; both changes are audited.
func TestDenyE2E(t *testing.T) {
	t.Parallel() // its own server and processes; it mostly waits for them
	pgs := pgtest.Start(t)
	url := pgs.NewDatabase(t)
	envs := map[string]string{"SLUICE_POSTGRES_URL": url}
	if out, err := sluiceCmd(t, envs, "migrate"); err != nil {
		t.Fatalf("sluice migrate: %v\n%s", err, out)
	}
	dir := t.TempDir()
	body := "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: hour, requests_per_unit: 100000}\n"
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
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
			return strings.Contains(body, `"source":"live","stale":false`)
		})
	}
	// admitted sends one hit per address to b and counts the OK answers.
	var addrs []string
	for i := range 10 {
		addrs = append(addrs, fmt.Sprintf("203.0.113.%d", i+1), fmt.Sprintf("198.51.100.%d", i+1))
	}
	admitted := func() int {
		ok := 0
		for _, addr := range addrs {
			resp := b.should(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", addr)}})
			if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
				ok++
			}
		}
		return ok
	}
	if got := admitted(); got != 20 {
		t.Fatalf("before any entry: %d of 20 admitted, want 20", got)
	}
	cmd := map[string]string{"SLUICE_ADMIN_TOKEN": e2eRW, "SLUICE_ADMIN_URL": a.base}
	out, err := sluiceCmd(t, cmd, "deny", "add", "--domain", "edge", "--key", "remote_address", "--cidr", "203.0.113.0/24", "--reason", "scanner", "--output", "json")
	var added admin.DenyJSON
	if err != nil || json.Unmarshal([]byte(out), &added) != nil || added.CIDR != "203.0.113.0/24" || added.Actor != "ops" {
		t.Fatalf("sluice deny add: %v\n%s", err, out)
	}
	took := waitUntil(t, "server b denies the range", 30*time.Second, func() bool { return admitted() == 10 })
	t.Logf("a deny entry added on server a applied on server b after %v", took)
	if got := admitted(); got != 10 {
		t.Errorf("with 203.0.113.0/24 denied: %d of 20 admitted, want 10", got)
	}
	out, err = sluiceCmd(t, cmd, "deny", "list")
	if err != nil || !strings.Contains(out, "203.0.113.0/24") || !strings.Contains(out, "scanner") {
		t.Errorf("sluice deny list: %v\n%s", err, out)
	}
	ro := map[string]string{"SLUICE_ADMIN_TOKEN": e2eRO, "SLUICE_ADMIN_URL": a.base}
	if out, err := sluiceCmd(t, ro, "deny", "rm", "--domain", "edge", "--key", "remote_address", "--cidr", "203.0.113.0/24"); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("rm with a read-only token: %v %s, want 403", err, out)
	}
	if out, err := sluiceCmd(t, cmd, "deny", "add", "--domain", "edge", "--key", "remote_address", "--cidr", "203.0.113.0/99"); err == nil || !strings.Contains(err.Error(), "cidr") {
		t.Errorf("add with a bad cidr: %v %s, want an error naming cidr", err, out)
	}
	if out, err := sluiceCmd(t, cmd, "deny", "rm", "--domain", "edge", "--key", "remote_address", "--cidr", "203.0.113.0/24"); err != nil {
		t.Fatalf("sluice deny rm: %v\n%s", err, out)
	}
	waitUntil(t, "server b admits again", 30*time.Second, func() bool { return admitted() == 20 })

	st, err := pg.Open(pg.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rows, err := st.AuditLog(context.Background(), "deny:edge/remote_address=203.0.113.0/24", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Action != "deny" || rows[1].Action != "undeny" || rows[0].Actor != "ops" {
		t.Errorf("audit rows: got %+v, want deny then undeny by ops", rows)
	}
}
