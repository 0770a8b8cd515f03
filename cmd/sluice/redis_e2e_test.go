package main

// End-to-end tests against a real redis-server (internal/redistest): two
// servers sharing one Redis, and the failure modes when Redis dies or hangs.
// Without redis-server they skip, except with CI=true, where they fail.

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/internal/redistest"
)

func withRedis(url string, edit func(*serveConfig)) func(*serveConfig) {
	return func(c *serveConfig) {
		c.Store.Kind = "redis"
		c.Store.Redis.URL = url
		// Generous, so that a loaded machine (-race, neighbours) does not
		// turn a slow reply into a store failure (an allotment or a charge
		// whose outcome is unknown skews the counts); tests of failures
		// set their own.
		c.Store.Redis.Timeout = 10 * time.Second
		if edit != nil {
			edit(c)
		}
	}
}

// TestTwoServersOneRedis: two servers sharing one Redis admit exactly the
// limit together, under concurrent load on both.
func TestTwoServersOneRedis(t *testing.T) {
	rd := redistest.Start(t)
	twoServersShareALimit(t, rd.URL())
}

// TestTwoServersOneRedisCluster: the same through a three-master Redis
// Cluster, named by a --redis-url with seed addresses.
func TestTwoServersOneRedisCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster; skipped with -short")
	}
	t.Parallel() // its own Cluster and servers; exact counts on still clocks
	c := redistest.StartCluster(t)
	twoServersShareALimit(t, c.URL())
}

func twoServersShareALimit(t *testing.T, url string) {
	t.Helper()
	dir := filepath.Join(repoRoot, "testdata/rules/failure")
	a := startServer(t, dir, withRedis(url, nil))
	b := startServer(t, dir, withRedis(url, nil))
	// Both fake clocks stand at storetest.Epoch and never move: one instant
	// for the fleet, as Redis TIME gives in production.
	const limit, perServer, workers = 50, 60, 6
	var admitted, denied atomic.Int64
	var wg sync.WaitGroup
	for _, ts := range []*testServer{a, b} {
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range perServer / workers {
					resp := ts.should(t, &rlsv3.RateLimitRequest{Domain: "failure",
						Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("shared", "fleet")}})
					switch resp.GetOverallCode() {
					case rlsv3.RateLimitResponse_OK:
						admitted.Add(1)
					case rlsv3.RateLimitResponse_OVER_LIMIT:
						denied.Add(1)
					default:
						t.Errorf("worker %d: overall_code %v", w, resp.GetOverallCode())
					}
				}
			}()
		}
	}
	wg.Wait()
	if admitted.Load() != limit || denied.Load() != 2*perServer-limit {
		t.Errorf("two servers admitted %d and denied %d of %d, want exactly %d admitted", admitted.Load(), denied.Load(), 2*perServer, limit)
	}
}

// checkJSON posts one descriptor to /v1/check and returns its status.
func checkJSON(t *testing.T, ts *testServer, key string) (code, degraded string, took time.Duration) {
	t.Helper()
	start := time.Now()
	c, body := post(t, ts.base+"/v1/check", `{"domain":"failure","descriptors":[{"entries":[{"key":"`+key+`","value":"v"}]}]}`)
	took = time.Since(start)
	if c != 200 {
		t.Fatalf("POST /v1/check %s = %d %s, want 200", key, c, body)
	}
	var r struct {
		Statuses []struct{ Code, Degraded string }
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || len(r.Statuses) != 1 {
		t.Fatalf("POST /v1/check %s body %s: %v", key, body, err)
	}
	return r.Statuses[0].Code, r.Statuses[0].Degraded, took
}

// TestRedisKilled: with Redis killed mid-test, open allows, closed denies and
// local enforces limit ÷ expected replicas in process; readiness reports the
// store down; when Redis comes back, decisions use it again.
func TestRedisKilled(t *testing.T) {
	t.Parallel() // its own server and processes; it mostly waits for them
	rd := redistest.Start(t)
	ts := startServer(t, filepath.Join(repoRoot, "testdata/rules/failure"), withRedis(rd.URL(), func(c *serveConfig) {
		c.Service.ExpectedReplicas = 2
	}))
	for _, key := range []string{"open", "closed", "local"} {
		if code, deg, _ := checkJSON(t, ts, key); code != "OK" || deg != "" {
			t.Fatalf("before the kill, %s: code %s degraded %q, want OK from the store", key, code, deg)
		}
	}
	rd.Kill()
	steps := []struct {
		key, wantCode, wantDegraded string
	}{
		{"open", "OK", "failed_open"},
		{"open", "OK", "failed_open"},
		{"open", "OK", "failed_open"},
		{"closed", "OVER_LIMIT", "failed_closed"},
		{"closed", "OVER_LIMIT", "failed_closed"},
		{"local", "OK", "local"}, // fallback limit 4 / 2 replicas = 2
		{"local", "OK", "local"},
		{"local", "OVER_LIMIT", "local"},
		{"open", "OK", "failed_open"},
	}
	for i, st := range steps {
		code, deg, _ := checkJSON(t, ts, st.key)
		if code != st.wantCode || deg != st.wantDegraded {
			t.Errorf("step %d, Redis dead, %s: code %s degraded %q, want %s %q", i, st.key, code, deg, st.wantCode, st.wantDegraded)
		}
	}
	// Ready by default: the instance still decides by failure_mode, and
	// says the store is down beside it (--readyz-strict: TestRedisDownAtStart).
	if code, body := get(t, ts.base+"/readyz"); code != 200 || !strings.Contains(body, "store: down") {
		t.Errorf("/readyz with Redis dead = %d %s, want 200 saying store: down", code, body)
	}
	if _, body := get(t, ts.base+"/healthz?verbose"); !strings.Contains(body, `"store":{"ok":false`) || !strings.Contains(body, `"ready":{"ok":true}`) {
		t.Errorf("/healthz?verbose with Redis dead = %s, want ready and the store not ok", body)
	}
	if _, body := get(t, ts.base+"/metrics"); !strings.Contains(body, `outcome="failed_open"`) || !strings.Contains(body, `outcome="failed_closed"`) || !strings.Contains(body, "sluice_store_up 0") {
		t.Errorf("/metrics does not count failed_open and failed_closed decisions, or lacks sluice_store_up 0")
	}

	rd.Restart()
	eventually(t, "decisions to come from Redis again after a restart", func() bool {
		_, deg, _ := checkJSON(t, ts, "closed")
		return deg == ""
	})
	// Readiness reports the store's health, which catches up on its own.
	eventually(t, "/readyz to say store: ok after Redis restart", func() bool {
		code, body := get(t, ts.base+"/readyz")
		return code == 200 && strings.Contains(body, "store: ok")
	})
}

// TestRedisHungBreaker: with Redis hung (SIGSTOP), the first checks wait
// for the store timeout, then the circuit breaker opens and no check waits
// for the store any more.
func TestRedisHungBreaker(t *testing.T) {
	t.Parallel() // its own server and processes; it mostly waits for them
	rd := redistest.Start(t)
	const storeTimeout = 600 * time.Millisecond
	ts := startServer(t, filepath.Join(repoRoot, "testdata/rules/failure"), withRedis(rd.URL(), func(c *serveConfig) {
		c.Store.Redis.Timeout = storeTimeout
	}))
	// The first calls load the script; on a loaded machine one may miss
	// the short timeout: poll until the store decides.
	eventually(t, "a decision from the store before the pause", func() bool {
		code, deg, _ := checkJSON(t, ts, "open")
		return code == "OK" && deg == ""
	})
	rd.Pause()
	defer rd.Resume()
	// The node's breaker opens after consecutive failures (store/redis).
	slow := 0
	for i := range 5 {
		code, deg, took := checkJSON(t, ts, "open")
		if code != "OK" || deg != "failed_open" {
			t.Errorf("hung check %d: code %s degraded %q, want OK failed_open", i, code, deg)
		}
		if took >= storeTimeout/2 {
			slow++
		}
	}
	if slow == 0 {
		t.Logf("no check waited for the hung store before the breaker opened (the client noticed sooner)")
	}
	// Open (2), or half-open (1) if the checks above took longer than its
	// OpenTimeout on a loaded machine: not closed while Redis hangs.
	open, halfOpen := `sluice_store_breaker_state{node="`+rd.Addr()+`"} 2`, `sluice_store_breaker_state{node="`+rd.Addr()+`"} 1`
	if _, body := get(t, ts.base+"/metrics"); !strings.Contains(body, open) && !strings.Contains(body, halfOpen) {
		t.Errorf("/metrics: no %s (the node's breaker open) while Redis hangs: %s", open, grepLines(body, "breaker_state"))
	}
	// With the breaker open no check waits on the store: each is refused by
	// the breaker, none is sent to time out (counted, not timed).
	storeErrors := func(reason string) float64 {
		t.Helper()
		_, body := get(t, ts.base+"/metrics")
		m := regexp.MustCompile(`(?m)^sluice_store_errors_total\{reason="` + reason + `"\} (\S+)$`).FindStringSubmatch(body)
		if m == nil {
			return 0
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	timeouts, refused := storeErrors("timeout"), storeErrors("breaker_open")
	for i := range 20 {
		code, deg, _ := checkJSON(t, ts, "closed")
		if code != "OVER_LIMIT" || deg != "failed_closed" {
			t.Errorf("breaker-open check %d: code %s degraded %q, want OVER_LIMIT failed_closed", i, code, deg)
		}
	}
	// Each check was refused by the breaker, or was the one probe it lets
	// through per OpenTimeout (1s: a loaded machine may take longer for the
	// 20 checks), which times out and opens it again.
	probes, refusals := storeErrors("timeout")-timeouts, storeErrors("breaker_open")-refused
	if probes+refusals != 20 || refusals == 0 {
		t.Errorf("20 checks with the breaker open: %v refused by the breaker, %v sent (half-open probes), want all 20 accounted for, some refused", refusals, probes)
	}
	if probes > 0 {
		t.Logf("%v of 20 checks were half-open probes (the checks took longer than OpenTimeout)", probes)
	}
}

// TestRedisDownAtStart: with Redis unreachable at start, serve starts anyway
// (no crash loop), decides by each limit's failure mode, reports not ready
// (--readyz-strict), and uses Redis as soon as it answers.
func TestRedisDownAtStart(t *testing.T) {
	rd := redistest.Start(t)
	rd.Kill()
	ts := startServer(t, filepath.Join(repoRoot, "testdata/rules/failure"), withRedis(rd.URL(), func(c *serveConfig) { c.Guard.ReadyzStrict = true }))
	if code, deg, _ := checkJSON(t, ts, "open"); code != "OK" || deg != "failed_open" {
		t.Errorf("Redis down at start, open: code %s degraded %q, want OK failed_open", code, deg)
	}
	if code, deg, _ := checkJSON(t, ts, "closed"); code != "OVER_LIMIT" || deg != "failed_closed" {
		t.Errorf("Redis down at start, closed: code %s degraded %q, want OVER_LIMIT failed_closed", code, deg)
	}
	if code, body := get(t, ts.base+"/readyz"); code != 503 || !strings.Contains(body, "store") {
		t.Errorf("/readyz --readyz-strict with Redis down at start = %d %s, want 503 naming the store", code, body)
	}
	rd.Restart()
	eventually(t, "the server to connect to Redis once it answers", func() bool {
		code, _ := get(t, ts.base+"/readyz")
		return code == 200
	})
	// The breaker may still be open for up to its timeout after connecting.
	eventually(t, "decisions to come from Redis", func() bool {
		_, deg, _ := checkJSON(t, ts, "open")
		return deg == ""
	})
}

// TestShutdownDrainsInFlight: a check in flight when shutdown begins (here
// waiting on a hung Redis) completes with its answer before serve returns.
func TestShutdownDrainsInFlight(t *testing.T) {
	t.Parallel() // its own Redis and server; it mostly waits on the hung Redis
	rd := redistest.Start(t)
	// Long, so that the call is surely in flight (sent, waiting on the
	// hung Redis) when shutdown begins, however loaded the machine.
	const storeTimeout = 3 * time.Second // under the 5s drain timeout
	ts := startServer(t, filepath.Join(repoRoot, "testdata/rules/failure"), withRedis(rd.URL(), func(c *serveConfig) {
		c.Store.Redis.Timeout = storeTimeout
	}))
	checkJSON(t, ts, "open") // connections warm
	rd.Pause()
	defer rd.Resume()
	type answer struct {
		code rlsv3.RateLimitResponse_Code
		err  error
	}
	answers := make(chan answer, 1)
	go func() {
		resp, err := ts.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "failure",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("open", "in-flight")}})
		answers <- answer{resp.GetOverallCode(), err}
	}()
	time.Sleep(time.Second) // the call is now waiting on Redis
	// Happened-before, not timing: the call is unanswered when shutdown
	// begins (Redis hangs) and answered when serve has returned.
	select {
	case a := <-answers:
		t.Fatalf("the call was answered (%v, %v) before shutdown began, want it waiting on the hung Redis", a.code, a.err)
	default:
	}
	ts.stop() // fails the test unless run returns nil
	select {
	case a := <-answers:
		if a.err != nil || a.code != rlsv3.RateLimitResponse_OK {
			t.Errorf("in-flight call across shutdown = %v, %v; want OK (failed open after the store timeout)", a.code, a.err)
		}
	default:
		t.Errorf("serve returned before the in-flight call was answered")
	}
}

// TestReadyzDuringDrain: while serve drains a gRPC call in flight after
// shutdown began, /readyz answers 503 "shutting down" (a probe sees the
// instance leave) instead of refusing connections.
func TestReadyzDuringDrain(t *testing.T) {
	t.Parallel() // its own Redis and server; it mostly waits on the hung Redis
	rd := redistest.Start(t)
	const storeTimeout = 3 * time.Second
	ts := startServer(t, filepath.Join(repoRoot, "testdata/rules/failure"), withRedis(rd.URL(), func(c *serveConfig) {
		c.Store.Redis.Timeout = storeTimeout
	}))
	checkJSON(t, ts, "open") // connections warm
	rd.Pause()
	defer rd.Resume()
	answered := make(chan struct{})
	go func() {
		_, _ = ts.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "failure",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("open", "in-flight")}})
		close(answered)
	}()
	time.Sleep(storeTimeout / 6) // the call is now waiting on Redis
	stopped := make(chan struct{})
	go func() { ts.stop(); close(stopped) }()
	for {
		select {
		case <-answered:
			t.Fatal("the in-flight call was answered before /readyz was seen answering 503 during the drain")
		default:
		}
		resp, err := http.Get(ts.base + "/readyz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 503 && strings.Contains(string(b), "shutting down") {
				break
			}
		} else if ts.draining.Load() {
			t.Fatalf("/readyz during the drain: %v, want 503 shutting down", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	<-stopped
}
