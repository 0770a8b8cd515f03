package main

// The deployment the README recommends, end to end: three `sluice serve
// --store redis` processes with default flags (the denied-key cache at its
// default, auto), tenants and audit rows in PostgreSQL, on one Redis and on
// a three-master Redis Cluster. Every admin action goes through the HTTP
// API of one instance (key reset, tenant reset, charge, refund, usage,
// switches), and afterwards every instance must agree: a customer denied
// everywhere before a reset or refund is admitted by all three after it,
// exactly as many times as the quota freed; no endpoint answers 501; usage
// skips no counter.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/pgtest"
	"github.com/sluice-rl/sluice/internal/redistest"
)

// resetRules: a monthly quota per tenant, and a monthly quota per endpoint
// of each tenant (a per-value counter below the tenant, which usage and
// tenant resets find by listing the store's keys).
const resetRules = `domain: api
tenant_key: api_key
descriptors:
  - key: api_key
    rate_limit: {unit: month, requests_per_unit: 4}
    descriptors:
      - key: endpoint
        rate_limit: {unit: month, requests_per_unit: 3}
`

// Quotas of resetRules.
const (
	tenantQuota   = 4
	endpointQuota = 3
)

// adminServer is one `sluice serve` process of the reset test.
type adminServer struct {
	base string
	cmd  *exec.Cmd
	out  *syncBuffer
}

// startAdminServer starts `sluice serve --store redis` with default flags
// but for the store, rules, listen addresses and admin tokens; PostgreSQL
// comes from SLUICE_POSTGRES_URL, as the README recommends.
func startAdminServer(t *testing.T, bin, rules, redisURL, pgURL, tokens string) *adminServer {
	t.Helper()
	httpAddr := mustFreeAddr(t)
	s := &adminServer{base: "http://" + httpAddr, out: &syncBuffer{}}
	s.cmd = exec.Command(bin, "serve", "--store", "redis", "--redis-url", redisURL, "--rules", rules,
		"--grpc-addr", mustFreeAddr(t), "--http-addr", httpAddr, "--debug-addr", "off",
		"--admin-token-file", tokens)
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	s.cmd.Env = append(os.Environ(), "SLUICE_POSTGRES_URL="+pgURL)
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start sluice serve: %v", err)
	}
	t.Cleanup(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("sluice serve %s log:\n%s", s.base, s.out.String())
		}
	})
	waitUntil(t, s.base+" ready with tenants live", 30*time.Second, func() bool {
		resp, err := http.Get(s.base + "/readyz")
		if err != nil {
			return false // not listening yet
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return err == nil && resp.StatusCode == 200 && strings.Contains(string(body), `tenants: {"source":"live","stale":false`)
	})
	return s
}

// admin sends an admin request and fails the test on any status but want;
// a 501 is named as such (an action the deployment cannot do).
func (s *adminServer) admin(t *testing.T, method, path, body string, want int) string {
	t.Helper()
	code, resp := adminDo(t, method, s.base+path, e2eRW, body)
	if code == http.StatusNotImplemented {
		t.Fatalf("%s %s on %s: 501 Not Implemented: %s", method, path, s.base, resp)
	}
	if code != want {
		t.Fatalf("%s %s on %s: %d %s, want %d", method, path, s.base, code, resp, want)
	}
	return resp
}

// descriptorJSON is acme's descriptor for endpoint ep ("" for the tenant's
// own counter).
func descriptorJSON(ep string) string {
	d := `{"key":"api_key","value":"acme"}`
	if ep != "" {
		d += `,{"key":"endpoint","value":` + strconv.Quote(ep) + `}`
	}
	return "[" + d + "]"
}

// check sends one hit of acme on endpoint ep to s and says whether it was
// admitted.
func (s *adminServer) check(t *testing.T, ep string) bool {
	t.Helper()
	code, body := post(t, s.base+"/v1/check", `{"domain":"api","descriptors":[{"entries":`+descriptorJSON(ep)+`}]}`)
	var resp struct {
		Allowed bool `json:"allowed"`
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil || (code != 200 && code != 429) {
		t.Fatalf("check %q on %s: %d %s (%v)", ep, s.base, code, body, err)
	}
	return resp.Allowed
}

// deniedEverywhere checks that every server denies acme on ep, twice (the
// second time from the denied-key cache where it is on).
func deniedEverywhere(t *testing.T, fleet []*adminServer, ep string) {
	t.Helper()
	for i, s := range fleet {
		for range 2 {
			if s.check(t, ep) {
				t.Fatalf("server %d admitted acme on %q, want denied (quota spent)", i, ep)
			}
		}
	}
}

// exhaust spends acme's quota of n on ep through server 0, then checks
// that every server denies.
func exhaust(t *testing.T, fleet []*adminServer, ep string, n int) {
	t.Helper()
	for i := range n {
		if !fleet[0].check(t, ep) {
			t.Fatalf("hit %d of %d on %q denied, want admitted", i+1, n, ep)
		}
	}
	deniedEverywhere(t, fleet, ep)
}

// agree checks, after units were given back on ep, that every server
// admits acme again (each polled until it does: the others learn of the
// give-back through Redis), and that the fleet admits exactly freed hits
// in all before denying again.
func agree(t *testing.T, fleet []*adminServer, ep string, freed int) {
	t.Helper()
	admitted := 0
	for i, s := range fleet {
		waitUntil(t, fmt.Sprintf("server %d admits acme on %q", i, ep), 20*time.Second, func() bool {
			if s.check(t, ep) {
				admitted++
				return true
			}
			return false
		})
	}
	for i := 0; ; i++ {
		if !fleet[i%len(fleet)].check(t, ep) {
			break
		}
		admitted++
		if admitted > freed {
			t.Fatalf("the fleet admitted %d hits of acme on %q after the give-back, want %d", admitted, ep, freed)
		}
	}
	if admitted != freed {
		t.Errorf("the fleet admitted %d hits of acme on %q after the give-back, want %d", admitted, ep, freed)
	}
	deniedEverywhere(t, fleet, ep)
}

// usageJSON is the part of GET /admin/v1/usage the test reads.
type usageJSON struct {
	Limits []struct {
		Rule    string `json:"rule"`
		Counter string `json:"counter"`
		Used    int64  `json:"used"`
	} `json:"limits"`
	Skipped   int      `json:"skipped"`
	Truncated []string `json:"truncated"`
}

// usage reads acme's usage on s: counter ("rule" or "rule counter") →
// used.
func (s *adminServer) usage(t *testing.T) (map[string]int64, usageJSON) {
	t.Helper()
	body := s.admin(t, "GET", "/admin/v1/usage/acme", "", 200)
	var u usageJSON
	if err := json.Unmarshal([]byte(body), &u); err != nil {
		t.Fatalf("usage on %s: %s: %v", s.base, body, err)
	}
	if u.Skipped != 0 || len(u.Truncated) != 0 {
		t.Errorf("usage on %s skipped %d rules, truncated %v; want every counter: %s", s.base, u.Skipped, u.Truncated, body)
	}
	m := map[string]int64{}
	for _, l := range u.Limits {
		m[strings.TrimSpace(l.Rule+" "+l.Counter)] = l.Used
	}
	return m, u
}

// TestFleetResetEndToEnd: the recommended deployment (see the file
// comment), on one Redis and on a three-master Cluster.
func TestFleetResetEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs three servers per Redis; skipped with -short")
	}
	t.Parallel() // its own PostgreSQL, Redis servers and processes; it mostly waits on them
	pgs := pgtest.Start(t)
	bin := buildSluice(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "api.yaml"), []byte(resetRules), 0o644); err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("ops rw "+e2eRW+"\nviewer ro "+e2eRO+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		url    func(t *testing.T) string
		cached bool // the denied-key cache is on by default (not on a Cluster)
	}{
		{"single", func(t *testing.T) string { return redistest.Start(t).URL() }, true},
		{"cluster", func(t *testing.T) string { return redistest.StartCluster(t).URL() }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pgURL := pgs.NewDatabase(t)
			migrate := exec.Command(bin, "migrate")
			migrate.Env = append(os.Environ(), "SLUICE_POSTGRES_URL="+pgURL)
			if out, err := migrate.CombinedOutput(); err != nil {
				t.Fatalf("sluice migrate: %v\n%s", err, out)
			}
			redisURL := tc.url(t)
			var fleet []*adminServer
			for range 3 {
				fleet = append(fleet, startAdminServer(t, bin, dir, redisURL, pgURL, tokens))
			}
			fleetResetScenario(t, fleet)
			for i, s := range fleet {
				_, metrics := get(t, s.base+"/metrics")
				hits := exposedValue(metrics, "sluice_denied_cache_hits_total")
				if tc.cached && hits <= 0 {
					t.Errorf("server %d: sluice_denied_cache_hits_total %v, want > 0 (the cache must have been in the way)", i, hits)
				}
				if !tc.cached && hits > 0 {
					t.Errorf("server %d: sluice_denied_cache_hits_total %v on a Cluster, want the cache off by default", i, hits)
				}
				if logs := s.out.String(); strings.Contains(logs, e2eRW) || strings.Contains(logs, pgURL) {
					t.Errorf("server %d's log holds a token or the PostgreSQL URL", i)
				}
			}
		})
	}
}

// fleetResetScenario runs every admin action through one server and checks
// that all three agree after each.
func fleetResetScenario(t *testing.T, fleet []*adminServer) {
	// One key reset, through server 1.
	exhaust(t, fleet, "orders", endpointQuota)
	body := fleet[1].admin(t, "POST", "/admin/v1/reset", `{"domain":"api","descriptor":`+descriptorJSON("orders")+`}`, 200)
	if !strings.Contains(body, `"keys_reset": 1`) || !strings.Contains(body, `"audited": true`) {
		t.Errorf("key reset: %s, want 1 key reset and audited", body)
	}
	agree(t, fleet, "orders", endpointQuota)

	// A tenant reset, through server 2: every counter of acme, those
	// found by listing the store's keys included.
	exhaust(t, fleet, "search", endpointQuota)
	exhaust(t, fleet, "", tenantQuota)
	body = fleet[2].admin(t, "POST", "/admin/v1/reset", `{"tenant":"acme"}`, 200)
	var rr struct {
		KeysReset int  `json:"keys_reset"`
		More      bool `json:"more"`
	}
	if err := json.Unmarshal([]byte(body), &rr); err != nil || rr.KeysReset != 3 || rr.More {
		t.Errorf("tenant reset: %s (%v), want 3 keys reset (orders, search, the tenant's), no more", body, err)
	}
	agree(t, fleet, "orders", endpointQuota)
	agree(t, fleet, "search", endpointQuota)
	agree(t, fleet, "", tenantQuota)

	// A refund through server 0 of the spent orders quota, then a charge
	// of a fresh counter through server 1 and its refund through server 2.
	fleet[0].admin(t, "POST", "/v1/charge", `{"domain":"api","hits":-3,"descriptors":[{"entries":`+descriptorJSON("orders")+`}]}`, 200)
	agree(t, fleet, "orders", endpointQuota)
	fleet[1].admin(t, "POST", "/v1/charge", `{"domain":"api","hits":3,"descriptors":[{"entries":`+descriptorJSON("billing")+`}]}`, 200)
	deniedEverywhere(t, fleet, "billing")
	fleet[2].admin(t, "POST", "/v1/charge", `{"domain":"api","hits":-3,"descriptors":[{"entries":`+descriptorJSON("billing")+`}]}`, 200)
	agree(t, fleet, "billing", endpointQuota)

	// Usage: every counter listed, and every server reads the same.
	want, u := fleet[0].usage(t)
	for _, c := range []string{"api_key", "api_key.endpoint endpoint:orders", "api_key.endpoint endpoint:search", "api_key.endpoint endpoint:billing"} {
		if _, ok := want[c]; !ok {
			t.Errorf("usage on server 0 lacks counter %q: %+v", c, u)
		}
	}
	for i, s := range fleet[1:] {
		got, _ := s.usage(t)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("usage on server %d = %v, server 0 says %v", i+1, got, want)
		}
	}

	// The kill switch, through server 0: the endpoint rule off lets acme
	// through on every server (its quota is spent), back on denies again.
	fleet[0].admin(t, "GET", "/admin/v1/switches", "", 200)
	rule := `{"domain":"api","rule":"api_key.endpoint","state":%q}`
	fleet[0].admin(t, "PUT", "/admin/v1/switches", fmt.Sprintf(rule, "off"), 200)
	for i, s := range fleet {
		waitUntil(t, fmt.Sprintf("server %d ignores the switched-off rule", i), 20*time.Second, func() bool { return s.check(t, "orders") })
	}
	fleet[0].admin(t, "PUT", "/admin/v1/switches", fmt.Sprintf(rule, "on"), 200)
	for i, s := range fleet {
		waitUntil(t, fmt.Sprintf("server %d applies the rule switched back on", i), 20*time.Second, func() bool { return !s.check(t, "orders") })
	}
}

// exposedValue returns the value of an unlabelled metric in a Prometheus
// text exposition, or -1 when it is absent.
func exposedValue(exposition, name string) float64 {
	for _, line := range strings.Split(exposition, "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			if v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64); err == nil {
				return v
			}
		}
	}
	return -1
}
