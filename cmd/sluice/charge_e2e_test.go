package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/pgtest"
)

// ordersRemaining looks at acme's orders limit without charging.
func ordersRemaining(t *testing.T, base string) int64 {
	t.Helper()
	code, body := post(t, base+"/v1/check", `{"domain":"api","hits":0,"descriptors":[{"entries":[{"key":"api_key","value":"acme"},{"key":"endpoint","value":"POST /api/v1/orders"}]}]}`)
	var resp struct{ Statuses []struct{ Remaining int64 } }
	if err := json.Unmarshal([]byte(body), &resp); code != 200 || err != nil || len(resp.Statuses) != 1 {
		t.Fatalf("check: %d %s (%v)", code, body, err)
	}
	return resp.Statuses[0].Remaining
}

// TestChargeAndResetEndToEnd: POST /v1/charge needs a read-write admin
// token and charges the counter checks use; sluice quota reset puts the
// tenant's quota back and writes an audit row; without admin tokens
// charges are off.
func TestChargeAndResetEndToEnd(t *testing.T) {
	t.Parallel() // its own server and processes; it mostly waits for them
	pgs := pgtest.Start(t)
	url := pgs.NewDatabase(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "api.yaml"), []byte(tenantRuleFile), 0o644); err != nil {
		t.Fatal(err)
	}
	tokFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokFile, []byte("ops rw "+e2eRW+"\nviewer ro "+e2eRO+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, dir, func(c *serveConfig) {
		c.Tenants.PostgresURL, c.Tenants.AdminTokenFile, c.Tenants.Migrate, c.Tenants.Resync = url, tokFile, true, time.Hour
	})
	waitReady(t, s)
	charge := `{"domain":"api","hits":15,"descriptors":[{"entries":[{"key":"api_key","value":"acme"},{"key":"endpoint","value":"POST /api/v1/orders"}]}]}`
	for _, tc := range []struct {
		token string
		want  int
	}{{"", 401}, {e2eRO, 403}} {
		if code, body := adminDo(t, "POST", s.base+"/v1/charge", tc.token, charge); code != tc.want {
			t.Errorf("charge with token %q: %d %s, want %d", tc.token, code, body, tc.want)
		}
	}
	if got := ordersRemaining(t, s.base); got != 20 {
		t.Fatalf("after refused charges: %d remaining, want 20", got)
	}
	code, body := adminDo(t, "POST", s.base+"/v1/charge", e2eRW, charge)
	if code != 200 || !strings.Contains(body, `"remaining":5`) {
		t.Fatalf("charge 15: %d %s, want 200 with 5 remaining", code, body)
	}
	if got := ordersRemaining(t, s.base); got != 5 {
		t.Errorf("check after charging 15: %d remaining, want 5", got)
	}

	cmdEnv := map[string]string{"SLUICE_ADMIN_TOKEN": e2eRW, "SLUICE_ADMIN_URL": s.base}
	out, err := sluiceCmd(t, cmdEnv, "quota", "reset", "acme")
	if err != nil || !strings.Contains(out, "reset 1 counters of acme") || strings.Contains(out, "no audit row") {
		t.Fatalf("sluice quota reset acme: %v\n%s", err, out)
	}
	if got := ordersRemaining(t, s.base); got != 20 {
		t.Errorf("after sluice quota reset: %d remaining, want 20", got)
	}
	roEnv := map[string]string{"SLUICE_ADMIN_TOKEN": e2eRO, "SLUICE_ADMIN_URL": s.base}
	if out, err := sluiceCmd(t, roEnv, "quota", "reset", "acme"); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("quota reset with a read-only token: %v %s; want 403", err, out)
	}
	if logs := s.logs.String(); strings.Contains(logs, e2eRW) || strings.Contains(logs, url) {
		t.Error("the server log holds a token or the PostgreSQL URL")
	}

	plain := startServer(t, dir, nil)
	if code, body := adminDo(t, "POST", plain.base+"/v1/charge", e2eRW, charge); code != 404 || !strings.Contains(body, "off") {
		t.Errorf("charge on a server without admin tokens: %d %s, want 404 saying charges are off", code, body)
	}
}
