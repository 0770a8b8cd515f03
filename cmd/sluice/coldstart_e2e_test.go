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

// coldStartRules: a tenant on pro gets 50 a day at the tenant key; below it,
// the orders endpoint allows 3 a minute on the free tier.
const coldStartRules = `domain: api
tenant_key: api_key
descriptors:
  - key: api_key
    rate_limit:
      unit: day
      requests_per_unit: 100
      tiers:
        free: {requests_per_unit: 5}
        pro: {requests_per_unit: 50}
    descriptors:
      - key: endpoint
        value: POST /orders
        rate_limit:
          unit: minute
          requests_per_unit: 10
          tiers:
            free: {requests_per_unit: 3}
`

// admitted sends n checks of one hit for the descriptor and counts those
// allowed.
func admitted(t *testing.T, base string, n int, entries string) int {
	t.Helper()
	ok := 0
	for range n {
		code, body := post(t, base+"/v1/check", `{"domain":"api","descriptors":[{"entries":[`+entries+`]}]}`)
		var resp struct{ Allowed bool }
		if err := json.Unmarshal([]byte(body), &resp); code != 200 || err != nil {
			t.Fatalf("check: %d %s", code, body)
		}
		if resp.Allowed {
			ok++
		}
	}
	return ok
}

// waitReady waits for /readyz to answer 200 (a server with tenants is not
// ready before it has loaded tenant data).
func waitReady(t *testing.T, s *testServer) {
	t.Helper()
	waitUntil(t, "ready", 10*time.Second, func() bool { code, _ := get(t, s.base+"/readyz"); return code == 200 })
}

// readyTenants is the tenant line of /readyz.
func readyTenants(t *testing.T, base string) (tenantsReady, string) {
	t.Helper()
	_, body := get(t, base+"/readyz")
	var r tenantsReady
	for _, line := range strings.Split(body, "\n") {
		if js, ok := strings.CutPrefix(line, "tenants: "); ok {
			if err := json.Unmarshal([]byte(js), &r); err != nil {
				t.Fatalf("/readyz tenant line %q: %v", line, err)
			}
		}
	}
	return r, body
}

// TestTenantsColdStart: an instance started while PostgreSQL is down
// enforces the tenants of the snapshot file another instance wrote, says
// so on /readyz with the snapshot's age, and goes live when PostgreSQL
// returns.
func TestTenantsColdStart(t *testing.T) {
	t.Parallel() // its own server and processes; it mostly waits for them
	pgs := pgtest.Start(t)
	url := pgs.NewDatabase(t)
	if out, err := sluiceCmd(t, map[string]string{"SLUICE_POSTGRES_URL": url}, "migrate"); err != nil {
		t.Fatalf("sluice migrate: %v\n%s", err, out)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "api.yaml"), []byte(coldStartRules), 0o644); err != nil {
		t.Fatal(err)
	}
	tokFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokFile, []byte("ops rw "+e2eRW+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	snapFile := filepath.Join(t.TempDir(), "cache", "tenants.snapshot")
	edit := func(c *serveConfig) {
		c.Tenants.PostgresURL, c.Tenants.AdminTokenFile, c.Tenants.Resync, c.Tenants.Snapshot = url, tokFile, time.Hour, snapFile
		// The file is written at most this often: the test waits for a
		// write after the PUT, not out the 10s default.
		c.Tenants.FileEvery = 100 * time.Millisecond
	}
	a := startServer(t, dir, edit)
	waitUntil(t, "a live", 10*time.Second, func() bool { r, _ := readyTenants(t, a.base); return r.Source == "live" && !r.Stale })
	if code, body := adminDo(t, "PUT", a.base+"/admin/v1/quotas/acme", e2eRW,
		`{"tier": "pro", "overrides": [{"domain": "api", "descriptor": "endpoint:POST /orders", "requests_per_unit": 7, "unit": "minute"}]}`); code != 200 {
		t.Fatalf("PUT acme: %d %s", code, body)
	}
	waitUntil(t, "a's snapshot file holds acme's override", 40*time.Second, func() bool {
		b, err := os.ReadFile(snapFile)
		return err == nil && strings.Contains(string(b), `"t":"acme"`) && strings.Contains(string(b), `"rpu":7`)
	})
	b, _ := os.ReadFile(snapFile)
	if strings.Contains(string(b), url) || strings.Contains(string(b), pgs.Addr()) {
		t.Errorf("the snapshot file holds the database URL or address")
	}

	pgs.Kill()
	c := startServer(t, dir, edit) // started while PostgreSQL is down
	r, body := readyTenants(t, c.base)
	if r.Source != "snapshot" || !r.Stale || r.AgeSeconds == nil || r.DataAt == nil || r.Records != 1 {
		t.Errorf("/readyz of the cold-started server: %+v (%s); want source snapshot, stale, an age, 1 record", r, body)
	}
	orders := `{"key":"api_key","value":"acme"},{"key":"endpoint","value":"POST /orders"}`
	if got := admitted(t, c.base, 20, orders); got != 7 {
		t.Errorf("orders admitted of 20 on the cold-started server: %d, want the override's 7 (the free tier gives 3)", got)
	}
	if got := admitted(t, c.base, 60, `{"key":"api_key","value":"acme"}`); got != 50 {
		t.Errorf("daily checks admitted of 60 on the cold-started server: %d, want pro's 50 (the free tier gives 5)", got)
	}

	pgs.Start()
	waitUntil(t, "the cold-started server goes live", 20*time.Second, func() bool {
		r, _ := readyTenants(t, c.base)
		return r.Source == "live" && !r.Stale && r.Records == 1
	})
	// Live again: a change made now reaches it. The write goes through a,
	// whose pool may still hand out a connection to the killed server
	// (used less than a second ago, so not pinged first): that write
	// answers 503, "nothing was changed, try again", and is tried again.
	var code int
	waitUntil(t, "a takes the write once PostgreSQL is back", 20*time.Second, func() bool {
		code, body = adminDo(t, "PUT", a.base+"/admin/v1/quotas/acme", e2eRW, `{"tier": "free"}`)
		return code != 503
	})
	if code != 200 {
		t.Fatalf("PUT acme free: %d %s", code, body)
	}
	waitUntil(t, "the cold-started server sees acme on free", 10*time.Second, func() bool {
		_, body := post(t, c.base+"/v1/check", `{"domain":"api","descriptors":[{"hits":0,"entries":[`+orders+`]}]}`)
		return strings.Contains(body, `"requests_per_unit":3,`)
	})
	for _, s := range []*testServer{a, c} {
		if logs := s.logs.String(); strings.Contains(logs, url) {
			t.Error("a server log holds the PostgreSQL URL")
		}
	}
}
