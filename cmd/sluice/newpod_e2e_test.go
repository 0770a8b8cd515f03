package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/internal/pgtest"
	"github.com/sluice-rl/sluice/internal/redistest"
)

// metricOf reads one sample of s's /metrics (with the read-write token).
func metricOf(t *testing.T, s *testServer, series string) string {
	t.Helper()
	_, body := adminDo(t, "GET", s.base+"/metrics", e2eRW, "")
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("/metrics has no %s", series)
	}
	return m[1]
}

// TestNewPodPostgresDown: a brand-new instance (no snapshot file) started
// while PostgreSQL is down
//
//   - with no copy of the tenant snapshot in its Redis is not ready (/readyz
//     503 naming each place it tried) and refuses checks, on HTTP (503) and
//     gRPC (UNAVAILABLE), instead of enforcing the free tier for everyone;
//     it turns ready once PostgreSQL returns;
//   - with the copy a first instance (that reached PostgreSQL) wrote to the
//     Redis they share, is ready at once (source "redis") and enforces the
//     tenant's overrides: 7 orders a minute and pro's 50 a day are admitted,
//     not the free tier's 3 and 5.
func TestNewPodPostgresDown(t *testing.T) {
	t.Parallel() // its own server and processes; it mostly waits for them
	pgs := pgtest.Start(t)
	url := pgs.NewDatabase(t)
	if out, err := sluiceCmd(t, map[string]string{"SLUICE_POSTGRES_URL": url}, "migrate"); err != nil {
		t.Fatalf("sluice migrate: %v\n%s", err, out)
	}
	shared := redistest.Start(t) // the fleet's Redis
	empty := redistest.Start(t)  // a Redis no instance has written a copy to
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "api.yaml"), []byte(coldStartRules), 0o644); err != nil {
		t.Fatal(err)
	}
	tokFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokFile, []byte("ops rw "+e2eRW+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// startServer gives each server a snapshot file path of its own that
	// does not exist yet: every server here is a new pod.
	edit := func(redisURL string) func(*serveConfig) {
		return withRedis(redisURL, func(c *serveConfig) {
			c.Tenants.PostgresURL, c.Tenants.AdminTokenFile, c.Tenants.Resync = url, tokFile, time.Hour
			// The copy is written at most this often: the test waits for
			// a write after the PUT, not out the 10s default.
			c.Tenants.CopyEvery = 100 * time.Millisecond
		})
	}

	a := startServer(t, dir, edit(shared.URL()))
	waitReady(t, a)
	if code, body := adminDo(t, "PUT", a.base+"/admin/v1/quotas/acme", e2eRW,
		`{"tier": "pro", "overrides": [{"domain": "api", "descriptor": "endpoint:POST /orders", "requests_per_unit": 7, "unit": "minute"}]}`); code != 200 {
		t.Fatalf("PUT acme: %d %s", code, body)
	}
	key := "sluice:{sluice:tenants:" + a.pg.Identity() + "}"
	waitUntil(t, "a's copy in Redis holds acme's override", 30*time.Second, func() bool {
		d, err := shared.Do("HGET", key, "d")
		s, _ := d.(string)
		return err == nil && strings.Contains(s, `"t":"acme"`) && strings.Contains(s, `"rpu":7`)
	})
	if d, _ := shared.Do("HGET", key, "d"); strings.Contains(d.(string), url) || strings.Contains(d.(string), pgs.Addr()) {
		t.Errorf("the copy in Redis holds the database URL or address")
	}

	pgs.Kill()
	orders := `{"key":"api_key","value":"acme"},{"key":"endpoint","value":"POST /orders"}`

	t.Run("no copy: not ready, checks refused", func(t *testing.T) {
		b := startServer(t, dir, edit(empty.URL()))
		var body string
		waitUntil(t, "b has looked for a copy in Redis", 20*time.Second, func() bool {
			_, body = get(t, b.base+"/readyz")
			return strings.Contains(body, "Redis copy: none")
		})
		code, body := get(t, b.base+"/readyz")
		for _, want := range []string{"not ready: tenant data never loaded", "PostgreSQL: unreachable", "snapshot file: none", "Redis copy: none", `source\":\"none`} {
			if code != 503 || !strings.Contains(body, want) {
				t.Errorf("/readyz: %d %s; want 503 saying %q", code, body, want)
			}
		}
		if code, _ := get(t, b.base+"/healthz"); code != 200 {
			t.Errorf("/healthz: %d, want 200 (alive, only not ready)", code)
		}
		code, body = post(t, b.base+"/v1/check", `{"domain":"api","descriptors":[{"entries":[`+orders+`]}]}`)
		if code != 503 || !strings.Contains(body, "tenant data never loaded") {
			t.Errorf("POST /v1/check: %d %s; want 503 with the reason", code, body)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := b.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("api_key", "acme")}})
		if st, _ := status.FromError(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "tenant data never loaded") {
			t.Errorf("ShouldRateLimit: %v; want UNAVAILABLE with the reason", err)
		}
		if hs, err := healthpb.NewHealthClient(b.conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || hs.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("gRPC health: %v, %v; want NOT_SERVING while checks are refused", hs.GetStatus(), err)
		}
		if got := metricOf(t, b, "sluice_tenants_unloaded_refusals_total"); got != "2" {
			t.Errorf("sluice_tenants_unloaded_refusals_total = %s, want 2", got)
		}
		if got := metricOf(t, b, "sluice_tenants_loaded"); got != "0" {
			t.Errorf("sluice_tenants_loaded = %s, want 0", got)
		}

		pgs.Start()
		t.Cleanup(pgs.Kill) // the next subtest starts while it is down
		waitUntil(t, "b ready once PostgreSQL is back", 30*time.Second, func() bool {
			r, _ := readyTenants(t, b.base)
			code, _ := get(t, b.base+"/readyz")
			return code == 200 && r.Source == "live"
		})
		if got := admitted(t, b.base, 20, orders); got != 7 {
			t.Errorf("orders admitted of 20 once ready: %d, want the override's 7", got)
		}
		if hs, err := healthpb.NewHealthClient(b.conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil || hs.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("gRPC health once ready: %v, %v; want SERVING", hs.GetStatus(), err)
		}
	})

	t.Run("the fleet's copy in Redis", func(t *testing.T) {
		c := startServer(t, dir, edit(shared.URL()))
		waitReady(t, c)
		r, body := readyTenants(t, c.base)
		if r.Source != "redis" || !r.Stale || r.Records != 1 || r.DataAt == nil {
			t.Errorf("/readyz: %+v (%s); want source redis, stale, 1 record, its time", r, body)
		}
		if got := admitted(t, c.base, 20, orders); got != 7 {
			t.Errorf("orders admitted of 20: %d, want the override's 7 (the free tier gives 3, the rule 10)", got)
		}
		if got := admitted(t, c.base, 60, `{"key":"api_key","value":"acme"}`); got != 50 {
			t.Errorf("daily checks admitted of 60: %d, want pro's 50 (the free tier gives 5)", got)
		}
		if logs := c.logs.String(); !strings.Contains(logs, "restored from the fleet's copy in Redis") {
			t.Errorf("the log does not say the copy was restored:\n%s", logs)
		}
		for _, s := range []*testServer{a, c} {
			if logs := s.logs.String(); strings.Contains(logs, url) {
				t.Error("a server log holds the PostgreSQL URL")
			}
		}
	})
}
