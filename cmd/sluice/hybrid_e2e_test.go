package main

import (
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/internal/redistest"
)

// Two servers over one Redis: a rule placed global or hybrid admits exactly
// its limit across both (a fixed window in hybrid placement is exact); one
// placed local admits its limit in each; hybrid decisions are mostly local,
// and repeated denials come from the denied-key cache.
func TestPlacementsTwoServers(t *testing.T) {
	t.Parallel() // its own server and processes; it mostly waits for them
	rd := redistest.Start(t)
	dir := filepath.Join(repoRoot, "testdata/rules/hybrid")
	a := startServer(t, dir, withRedis(rd.URL(), nil))
	b := startServer(t, dir, withRedis(rd.URL(), nil))
	const limit, perServer, workers = 40, 60, 4
	metric := func(ts *testServer, name string) float64 {
		t.Helper()
		_, body := get(t, ts.base+"/metrics")
		m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("/metrics has no %s", name)
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	for _, key := range []string{"global", "hybrid", "local"} {
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for _, ts := range []*testServer{a, b} {
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range perServer / workers {
						resp := ts.should(t, &rlsv3.RateLimitRequest{Domain: "placed",
							Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor(key, "x")}})
						if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
							admitted.Add(1)
						}
					}
				}()
			}
		}
		wg.Wait()
		// Then drain: units a server was allotted after its last request
		// of the burst are spent by its next ones (a hybrid fixed window
		// may under-admit only by what is reserved and unspent).
		for quiet := 0; quiet < 10; {
			quiet++
			for _, ts := range []*testServer{a, b} {
				resp := ts.should(t, &rlsv3.RateLimitRequest{Domain: "placed",
					Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor(key, "x")}})
				if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
					admitted.Add(1)
					quiet = 0
				}
			}
		}
		want := int64(limit)
		if key == "local" {
			want = 2 * limit // each server on its own
		}
		got := admitted.Load()
		switch {
		case got > want:
			t.Errorf("placement %s: two servers admitted %d, want at most %d", key, got, want)
		case got < want && key == "hybrid":
			// Units that expired unspent are the only ones allowed lost.
			voided := int64(metric(a, "sluice_hybrid_units_voided_total") + metric(b, "sluice_hybrid_units_voided_total"))
			if got+voided < want {
				t.Errorf("placement %s: two servers admitted %d and voided %d, want %d in all", key, got, voided, want)
			}
		case got < want:
			t.Errorf("placement %s: two servers admitted %d, want %d", key, got, want)
		}
	}
	for _, ts := range []*testServer{a, b} {
		if metric(ts, "sluice_hybrid_local_total") == 0 {
			t.Errorf("no hybrid decision was local")
		}
		// The store's subscription to reset announcements was confirmed
		// (allotments voided once, before any lease); no key was reset.
		if f, r := metric(ts, "sluice_hybrid_reset_flushes_total"), metric(ts, "sluice_hybrid_resets_total"); f < 1 || r != 0 {
			t.Errorf("sluice_hybrid_reset_flushes_total %v, sluice_hybrid_resets_total %v; want ≥ 1 and 0", f, r)
		}
		if metric(ts, "sluice_denied_cache_hits_total") == 0 {
			_, body := get(t, ts.base+"/metrics")
			t.Errorf("no denial came from the cache: %s", grepLines(body, "sluice_denied"))
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestHybridUnitsHeld: sluice_hybrid_units_held says how many units the
// instance holds in hybrid allotments, so that placement hybrid's bound
// (admitted ≤ exact + units held) can be checked from outside: more than
// zero while allotments are out, with admitted + held within the quota the
// global store counted; zero once the quota is spent.
func TestHybridUnitsHeld(t *testing.T) {
	rd := redistest.Start(t)
	ts := startServer(t, filepath.Join(repoRoot, "testdata/rules/hybrid"), withRedis(rd.URL(), nil))
	const limit = 40
	held := func() float64 {
		t.Helper()
		_, body := get(t, ts.base+"/metrics")
		m := regexp.MustCompile(`(?m)^sluice_hybrid_units_held (\S+)$`).FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("/metrics has no sluice_hybrid_units_held")
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	if h := held(); h != 0 {
		t.Errorf("sluice_hybrid_units_held = %v before any hit, want 0", h)
	}
	hit := func() bool {
		resp := ts.should(t, &rlsv3.RateLimitRequest{Domain: "placed", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("hybrid", "held")}})
		return resp.GetOverallCode() == rlsv3.RateLimitResponse_OK
	}
	admitted := 0
	var h float64
	for range limit / 2 {
		if hit() {
			admitted++
		}
		if h = held(); h > 0 {
			break
		}
	}
	if h == 0 {
		t.Fatalf("sluice_hybrid_units_held = 0 after %d hits of a hybrid limit of %d, want the units of its allotment", admitted, limit)
	}
	if admitted+int(h) > limit {
		t.Errorf("admitted %d + held %v > the limit %d", admitted, h, limit)
	}
	t.Logf("after %d admitted: %v units held", admitted, h)
	for denied := 0; denied < 5; {
		if hit() {
			admitted++
		} else {
			denied++
		}
	}
	if h := held(); h != 0 || admitted > limit {
		t.Errorf("quota spent: admitted %d of %d, sluice_hybrid_units_held = %v; want at most %d and 0 held", admitted, limit, h, limit)
	}
}
