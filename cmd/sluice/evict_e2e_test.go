package main

// Redis memory full, end to end against a real redis-server at a small
// maxmemory (issue 28): an evicting policy is refused at start; accepted
// with --redis-allow-eviction, its evictions show in a metric, the log and
// /readyz; with noeviction, a full memory fails writes, each limit's
// failure mode decides and is counted, and the store admits no limit past
// its quota.

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
)

// evictRules: exact limits (fixed_window, gcra, token_bucket), one per
// failure mode each, and a per-user limit that a flood of unique users
// turns into a flood of unique Redis keys.
const evictRules = `domain: evict
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000, failure_mode: open}
%s`

// evictAlgorithms and evictModes name the exact limits: key
// "<algorithm>_<mode>", quota evictQuota per hour.
var (
	evictAlgorithms = []string{"fixed_window", "gcra", "token_bucket"}
	evictModes      = []string{"open", "closed", "local"}
)

const evictQuota = 20

func evictRuleDir(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, a := range evictAlgorithms {
		for _, m := range evictModes {
			fmt.Fprintf(&b, "  - key: %s_%s\n    rate_limit: {unit: hour, requests_per_unit: %d, algorithm: %s, failure_mode: %s}\n", a, m, evictQuota, a, m)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "evict.yaml"), fmt.Appendf(nil, evictRules, b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// floodBody is a /v1/check body of 64 unique users with long values:
// about 200 KB of new Redis keys.
func floodBody(round int) string {
	pad := strings.Repeat("x", 3000)
	var ds []string
	for i := range 64 {
		ds = append(ds, fmt.Sprintf(`{"entries":[{"key":"user","value":"%d-%d-%s"}]}`, round, i, pad))
	}
	return `{"domain":"evict","descriptors":[` + strings.Join(ds, ",") + `]}`
}

// evictCheck asks for one hit of an exact limit and returns its status's
// code and degraded mode ("" when the store decided).
func evictCheck(t *testing.T, ts *testServer, key string) (code, degraded string) {
	t.Helper()
	c, body := post(t, ts.base+"/v1/check", `{"domain":"evict","descriptors":[{"entries":[{"key":"`+key+`","value":"v"}]}]}`)
	var r struct {
		Statuses []struct{ Code, Degraded string }
	}
	if c != 200 || json.Unmarshal([]byte(body), &r) != nil || len(r.Statuses) != 1 {
		t.Fatalf("POST /v1/check %s = %d %s", key, c, body)
	}
	return r.Statuses[0].Code, r.Statuses[0].Degraded
}

// limitCount is what one exact limit answered.
type limitCount struct {
	storeOK, storeDenied int            // decided by Redis
	degraded             map[string]int // by degraded mode and code: "failed_open OK", …
}

func (c limitCount) String() string {
	return fmt.Sprintf("store admitted %d, denied %d; degraded %v", c.storeOK, c.storeDenied, c.degraded)
}

// hitExact asks each exact limit once and counts the answers.
func hitExact(t *testing.T, ts *testServer, counts map[string]*limitCount) {
	t.Helper()
	for _, a := range evictAlgorithms {
		for _, m := range evictModes {
			key := a + "_" + m
			c := counts[key]
			if c == nil {
				c = &limitCount{degraded: map[string]int{}}
				counts[key] = c
			}
			code, deg := evictCheck(t, ts, key)
			switch {
			case deg == "" && code == "OK":
				c.storeOK++
			case deg == "":
				c.storeDenied++
			default:
				c.degraded[deg+" "+code]++
			}
		}
	}
}

// usedMemory returns the server's used_memory.
func usedMemory(t *testing.T, rd *redistest.Server) int64 {
	t.Helper()
	r, err := rd.Do("INFO", "memory")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`used_memory:(\d+)`).FindStringSubmatch(r.(string))
	if m == nil {
		t.Fatalf("INFO memory has no used_memory: %v", r)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// TestRedisEvictionPolicyRefused: sluice serve refuses to start on a Redis
// whose maxmemory-policy evicts, naming the fix and the flag.
func TestRedisEvictionPolicyRefused(t *testing.T) {
	rd := redistest.StartArgs(t, "--maxmemory-policy", "allkeys-lru")
	cfg := defaultServeConfig()
	cfg.Rules.Dir = evictRuleDir(t)
	cfg.Listen = listenConfig{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", Debug: "off"}
	withRedis(rd.URL(), nil)(&cfg)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s, err := newServer(cfg, slog.New(slog.DiscardHandler), deps{})
	if err == nil {
		s.close()
		t.Fatal("newServer over an allkeys-lru Redis = nil error, want a refusal")
	}
	for _, want := range []string{"allkeys-lru", "CONFIG SET maxmemory-policy noeviction", "redis.conf", "--redis-allow-eviction"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("newServer = %q, want it to name %q", err, want)
		}
	}
}

// TestRedisEvictionAllowed: with --redis-allow-eviction, a flood of unique
// keys into a full allkeys-lru Redis evicts keys, and the evictions show in
// sluice_redis_evicted_keys_total, a warning in the log and /readyz. The
// exact limits' admissions are logged (eviction may reset their counters:
// that is the risk the flag accepts).
func TestRedisEvictionAllowed(t *testing.T) {
	t.Parallel() // its own Redis and server; the evictions are polled for
	rd := redistest.StartArgs(t, "--maxmemory-policy", "allkeys-lru")
	ts := startServer(t, evictRuleDir(t), withRedis(rd.URL(), func(c *serveConfig) {
		c.Store.Redis.AllowEviction = true
		c.Store.Redis.MemoryWatch = 50 * time.Millisecond
		c.Service.ExpectedReplicas = 2
	}))
	if _, body := get(t, ts.base+"/readyz"); !strings.Contains(body, "redis eviction: at risk: maxmemory-policy allkeys-lru on 1 node(s); 0 keys evicted") ||
		!strings.Contains(body, "accepted by --redis-allow-eviction") {
		t.Errorf("/readyz before the flood = %q, want the accepted allkeys-lru named", body)
	}
	if _, err := rd.Do("CONFIG", "SET", "maxmemory", strconv.FormatInt(usedMemory(t, rd)+2<<20, 10)); err != nil {
		t.Fatal(err)
	}
	counts := map[string]*limitCount{}
	series := `sluice_redis_evicted_keys_total{node="` + rd.Addr() + `"}`
	var evicted float64
	const rounds = 4 * evictQuota
	for round := range rounds {
		if c, body := post(t, ts.base+"/v1/check", floodBody(round)); c != 200 {
			t.Fatalf("flood %d: %d %s", round, c, body)
		}
		hitExact(t, ts, counts)
	}
	deadline := time.Now().Add(30 * time.Second)
	for evicted == 0 && time.Now().Before(deadline) {
		_, metrics := get(t, ts.base+"/metrics")
		if m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(metrics); m != nil {
			evicted, _ = strconv.ParseFloat(m[1], 64)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if evicted == 0 {
		t.Fatalf("%s is 0 (or absent) after %d flood requests into a full allkeys-lru Redis", series, rounds)
	}
	for _, a := range evictAlgorithms {
		for _, m := range evictModes {
			t.Logf("allkeys-lru, %d hits of %s_%s (quota %d): %v", rounds, a, m, evictQuota, counts[a+"_"+m])
		}
	}
	t.Logf("%s = %v", series, evicted)
	if logs := ts.logs.String(); !strings.Contains(logs, "Redis evicted keys") {
		t.Errorf("log has no warning that Redis evicted keys:\n%s", logs)
	}
	if _, body := get(t, ts.base+"/readyz"); !strings.Contains(body, "redis eviction: at risk") || strings.Contains(body, " 0 keys evicted") ||
		!strings.Contains(body, "admit more than their quota") {
		t.Errorf("/readyz after the flood = %q, want the evictions counted", body)
	}
}

// TestRedisMemoryFullNoEviction: with noeviction, a flood of unique keys
// fills Redis's memory; writes then fail ("OOM command not allowed"): a hit
// Redis would admit (a write) is decided by its limit's failure mode,
// counted in sluice_decisions_total by outcome, while a hit it denies (a
// read) is still denied by Redis; so Redis admits no limit past its quota.
func TestRedisMemoryFullNoEviction(t *testing.T) {
	rd := redistest.Start(t) // noeviction, Redis's default
	ts := startServer(t, evictRuleDir(t), withRedis(rd.URL(), func(c *serveConfig) {
		c.Store.Redis.MemoryWatch = 50 * time.Millisecond
		c.Service.ExpectedReplicas = 2
	}))
	if _, body := get(t, ts.base+"/readyz"); !strings.Contains(body, "redis eviction: ok: maxmemory-policy noeviction on 1 node(s); 0 keys evicted") {
		t.Errorf("/readyz = %q, want redis eviction ok", body)
	}
	counts := map[string]*limitCount{}
	// Before: every limit spends a quarter of its quota in Redis; one
	// more (the "exhausted" limits below) spends all of it.
	const before = evictQuota / 4
	for range before {
		hitExact(t, ts, counts)
	}
	exhausted := "gcra_closed"
	for range evictQuota - before {
		if code, deg := evictCheck(t, ts, exhausted); code != "OK" || deg != "" {
			t.Fatalf("%s before the flood: %s %q, want OK from Redis", exhausted, code, deg)
		}
	}
	if _, err := rd.Do("CONFIG", "SET", "maxmemory", strconv.FormatInt(usedMemory(t, rd)+2<<20, 10)); err != nil {
		t.Fatal(err)
	}
	floods := 0
	for {
		c, body := post(t, ts.base+"/v1/check", floodBody(floods))
		if c != 200 {
			t.Fatalf("flood %d: %d %s", floods, c, body)
		}
		floods++
		if strings.Contains(body, `"degraded":"failed_open"`) {
			break // Redis refused the flood's writes: memory is full
		}
		if floods > 1000 {
			t.Fatalf("Redis still took writes after %d flood requests of 64 keys of 3 KB into a 2 MB maxmemory", floods)
		}
	}
	// Redis refuses a write only when its used_memory is over maxmemory
	// as the command starts, and the flood's refused request counted its
	// own 200 KB of arguments: memory now sits just under the limit, where
	// small writes still fit. A flood whose last admitted call overshoots
	// leaves it over; set that state at once, 64 KB over.
	used := usedMemory(t, rd)
	if _, err := rd.Do("CONFIG", "SET", "maxmemory", strconv.FormatInt(used-64<<10, 10)); err != nil {
		t.Fatal(err)
	}
	t.Logf("Redis memory full after %d flood requests (used_memory %d)", floods, used)
	const during = 3 * evictQuota
	for range during {
		hitExact(t, ts, counts)
	}
	_, metrics := get(t, ts.base+"/metrics")
	for _, a := range evictAlgorithms {
		for _, m := range evictModes {
			key := a + "_" + m
			c := counts[key]
			t.Logf("noeviction: %d hits of %s (quota %d) before the memory was full, %d after: %v", before, key, evictQuota, during, c)
			if key == exhausted {
				// Spent in Redis: a denial writes nothing, so Redis still decides.
				if c.storeOK != before || c.storeDenied != during || len(c.degraded) != 0 {
					t.Errorf("%s (its quota spent before): %v, want Redis to admit %d and deny all %d asked with memory full", key, c, before, during)
				}
				continue
			}
			if c.storeOK != before || c.storeDenied != 0 {
				t.Errorf("%s: %v, want Redis to admit exactly the %d hits before memory was full, and none after", key, c, before)
			}
			wantDegraded := map[string]string{"open": "failed_open OK", "closed": "failed_closed OVER_LIMIT", "local": "local"}[m]
			var degraded int
			for k, n := range c.degraded {
				degraded += n
				if !strings.HasPrefix(k, wantDegraded) {
					t.Errorf("%s: %d answers %q, want only %q while Redis refuses writes", key, n, k, wantDegraded)
				}
			}
			if degraded != during {
				t.Errorf("%s: %d degraded answers, want all %d asked with memory full", key, degraded, during)
			}
			if m == "local" && c.degraded["local OK"] != evictQuota/2 {
				t.Errorf("%s: the local fallback admitted %d, want quota ÷ expected replicas = %d", key, c.degraded["local OK"], evictQuota/2)
			}
			// Each degraded answer is counted under its outcome.
			for k, n := range c.degraded {
				outcome := map[string]string{"failed_open OK": "failed_open", "failed_closed OVER_LIMIT": "failed_closed", "local OK": "local_allowed", "local OVER_LIMIT": "local_denied"}[k]
				re := regexp.MustCompile(`(?m)^sluice_decisions_total\{[^}]*outcome="` + outcome + `"[^}]*rule="[^"]*` + key + `"\} (\S+)$`)
				mm := re.FindStringSubmatch(metrics)
				if mm == nil || mm[1] != strconv.Itoa(n) {
					t.Errorf("sluice_decisions_total of %s, outcome %s = %v, want %d (the %q answers)", key, outcome, mm, n, k)
				}
			}
		}
	}
	if m := regexp.MustCompile(`(?m)^sluice_store_errors_total\{reason="(error|breaker_open)"\} (\S+)$`).FindStringSubmatch(metrics); m == nil {
		t.Errorf("/metrics counts no store error (reason error or breaker_open)")
	}
	if _, body := get(t, ts.base+"/readyz"); !strings.Contains(body, "redis eviction: ok: maxmemory-policy noeviction on 1 node(s); 0 keys evicted") {
		t.Errorf("/readyz with memory full = %q, want redis eviction ok (noeviction evicts nothing)", body)
	}
}
