package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/pgtest"
)

const tenantRuleFile = `domain: api
tenant_key: api_key
descriptors:
  - key: api_key
    rate_limit:
      unit: minute
      requests_per_unit: 100
      tiers:
        pro: {requests_per_unit: 1000}
        enterprise: {requests_per_unit: 10000}
    descriptors:
      - key: endpoint
        value: POST /api/v1/orders
        rate_limit: {unit: minute, requests_per_unit: 20}
`

const (
	e2eRW = "rw-e2e-token-0123456789"
	e2eRO = "ro-e2e-token-0123456789"
)

// ordersLimit asks server base for the limit of acme's orders, looking
// without charging.
func ordersLimit(t *testing.T, base, tenantName string) uint32 {
	t.Helper()
	code, body := post(t, base+"/v1/check", `{"domain":"api","descriptors":[{"hits":0,"entries":[{"key":"api_key","value":"`+tenantName+`"},{"key":"endpoint","value":"POST /api/v1/orders"}]}]}`)
	if code != 200 {
		t.Fatalf("check: %d %s", code, body)
	}
	var resp struct {
		Statuses []struct {
			Limit struct {
				RequestsPerUnit uint32 `json:"requests_per_unit"`
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil || len(resp.Statuses) != 1 {
		t.Fatalf("check answer %s: %v", body, err)
	}
	return resp.Statuses[0].Limit.RequestsPerUnit
}

func sluiceCmd(t *testing.T, envs map[string]string, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, func(k string) string { return envs[k] }, &out, &errOut)
	return out.String() + errOut.String(), err
}

// waitUntil polls cond until it holds and returns how long that took (to
// log). limit is what is expected on a quiet machine; the poll fails only
// after a minute, or limit if longer: a loaded machine is slow, not wrong.
func waitUntil(t *testing.T, what string, limit time.Duration, cond func() bool) time.Duration {
	t.Helper()
	limit = max(limit, time.Minute)
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("not within %v: %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

func adminDo(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

// TestTenantsEndToEnd: sluice migrate, two servers over one PostgreSQL, a
// quota set through one reaching the other within 10s, the sluice quota
// commands, tokens refused, PostgreSQL killed (stale, last overrides kept,
// 503 on writes, a server started meanwhile on rule-file limits, opted in)
// and back.
func TestTenantsEndToEnd(t *testing.T) {
	t.Parallel() // its own server and processes; it mostly waits for them
	pgs := pgtest.Start(t)
	url := pgs.NewDatabase(t)
	envs := map[string]string{"SLUICE_POSTGRES_URL": url}
	if out, err := sluiceCmd(t, envs, "migrate"); err != nil || !strings.Contains(out, "applied 0001_tenants") {
		t.Fatalf("sluice migrate: %v\n%s", err, out)
	}
	if out, err := sluiceCmd(t, envs, "migrate"); err != nil || !strings.Contains(out, "nothing applied") {
		t.Fatalf("sluice migrate again: %v\n%s", err, out)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "api.yaml"), []byte(tenantRuleFile), 0o644); err != nil {
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
			return strings.Contains(body, `tenants: {"source":"live","stale":false`)
		})
	}
	if got := ordersLimit(t, b.base, "acme"); got != 20 {
		t.Fatalf("before: limit %d, want the rule's 20", got)
	}

	cmdEnv := map[string]string{"SLUICE_ADMIN_TOKEN": e2eRW, "SLUICE_ADMIN_URL": a.base}
	out, err := sluiceCmd(t, cmdEnv, "quota", "set", "acme", "--tier", "enterprise", "--domain", "api", "--override", "endpoint:POST /api/v1/orders=500/minute", "--output", "json")
	if err != nil || !strings.Contains(out, `"override"`) {
		t.Fatalf("sluice quota set: %v\n%s", err, out)
	}
	took := waitUntil(t, "server b enforces the override set through a", 10*time.Second, func() bool { return ordersLimit(t, b.base, "acme") == 500 })
	t.Logf("a quota set on server a applied on server b after %v", took)
	if out, err := sluiceCmd(t, cmdEnv, "quota", "get", "acme", "--output", "json"); err != nil || !strings.Contains(out, `"tier": "enterprise"`) {
		t.Errorf("sluice quota get: %v\n%s", err, out)
	}
	if out, err := sluiceCmd(t, cmdEnv, "quota", "list", "--tier", "enterprise", "--output", "json"); err != nil || !strings.Contains(out, `"acme"`) {
		t.Errorf("sluice quota list: %v\n%s", err, out)
	}
	roEnv := map[string]string{"SLUICE_ADMIN_TOKEN": e2eRO, "SLUICE_ADMIN_URL": a.base}
	if out, err := sluiceCmd(t, roEnv, "quota", "rm", "acme"); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("quota rm with a read-only token: %v %s; want 403", err, out)
	}
	if code, _ := adminDo(t, "PUT", a.base+"/admin/v1/quotas/x", "", `{"tier":"pro"}`); code != 401 {
		t.Errorf("PUT without a token: %d, want 401", code)
	}
	if code, body := adminDo(t, "PUT", a.base+"/admin/v1/switches", e2eRW, `{"domain":"api","rule":"api_key.endpoint=POST /api/v1/orders","state":"shadow"}`); code != 200 {
		t.Fatalf("switch: %d %s", code, body)
	}
	waitUntil(t, "/debug/rules on b shows the switch", 10*time.Second, func() bool {
		_, body := adminDo(t, "GET", b.base+"/debug/rules", e2eRO, "")
		return strings.Contains(body, `"switch":"shadow"`)
	})
	_, _ = adminDo(t, "PUT", a.base+"/admin/v1/switches", e2eRW, `{"domain":"api","rule":"api_key.endpoint=POST /api/v1/orders","state":"on"}`)

	// PostgreSQL goes away.
	pgs.Kill()
	waitUntil(t, "b says stale", 10*time.Second, func() bool {
		_, body := get(t, b.base+"/readyz")
		_, metrics := get(t, b.base+"/metrics")
		return strings.Contains(body, `"stale":true`) && strings.Contains(metrics, "sluice_tenants_stale 1")
	})
	if code, _ := get(t, b.base+"/readyz"); code != 200 {
		t.Errorf("/readyz while PostgreSQL is down: %d, want 200 (checks still work)", code)
	}
	if got := ordersLimit(t, b.base, "acme"); got != 500 {
		t.Errorf("while down: limit %d, want the last known 500", got)
	}
	if code, body := adminDo(t, "PUT", a.base+"/admin/v1/quotas/acme", e2eRW, `{"tier":"pro"}`); code != 503 {
		t.Errorf("PUT while down: %d %s, want 503", code, body)
	}
	// Started while PostgreSQL is down, with no snapshot: opted in to the
	// rule files' limits (the default refuses: TestNewPodPostgresDown).
	c := startServer(t, dir, func(c *serveConfig) { edit(c); c.Tenants.Unloaded = unloadedDefaults })
	if got := ordersLimit(t, c.base, "acme"); got != 20 {
		t.Errorf("server started while down: limit %d, want the rule file's 20", got)
	}
	if code, body := get(t, c.base+"/readyz"); code != 200 {
		t.Errorf("/readyz of the server started while down with --tenants-unloaded defaults: %d %s, want 200", code, body)
	}
	pgs.Start()
	for _, s := range []*testServer{b, c} {
		waitUntil(t, "caught up after PostgreSQL returned", 15*time.Second, func() bool { return ordersLimit(t, s.base, "acme") == 500 })
	}
	if out, err := sluiceCmd(t, cmdEnv, "quota", "rm", "acme"); err != nil || !strings.Contains(out, "removed acme") {
		t.Errorf("sluice quota rm: %v\n%s", err, out)
	}
	waitUntil(t, "b back on the rule's limit", 10*time.Second, func() bool { return ordersLimit(t, b.base, "acme") == 20 })
	for _, s := range []*testServer{a, b, c} {
		if logs := s.logs.String(); strings.Contains(logs, e2eRW) || strings.Contains(logs, url) {
			t.Error("a server log holds a token or the PostgreSQL URL")
		}
	}
}
