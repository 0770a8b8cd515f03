package service

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/store/compose"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/stack"
	"github.com/sluice-rl/sluice/store/storetest"
)

// recordingStore records the keys that reach it.
type recordingStore struct {
	sluice.Store
	mu   sync.Mutex
	keys []string
}

func (r *recordingStore) Take(ctx context.Context, ops []sluice.Op, res []sluice.Result) error {
	r.mu.Lock()
	for _, op := range ops {
		r.keys = append(r.keys, op.Key)
	}
	r.mu.Unlock()
	return r.Store.Take(ctx, ops, res)
}

const placedRules = `domain: p
descriptors:
  - key: g
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: h
    rate_limit: {unit: second, requests_per_unit: 1, placement: hybrid}
  - key: l
    rate_limit: {unit: second, requests_per_unit: 1, placement: local}
`

func TestPlacedRoutes(t *testing.T) {
	clock := storetest.NewClock()
	mk := func() *recordingStore {
		m := memory.New(memory.Options{Now: clock.Now})
		t.Cleanup(func() { m.Close() })
		return &recordingStore{Store: m}
	}
	g, h, l := mk(), mk(), mk()
	snap, err := rules.Parse("p.yaml", []byte(placedRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hs := newHarnessSnap(t, snap, DefaultConfig(), &compose.Placed{Global: g, Hybrid: h, Local: l})
	for _, k := range []string{"g", "h", "l"} {
		hs.check(t, Request{Domain: "p", Descriptors: []Descriptor{desc(k, "1")}})
	}
	for _, tc := range []struct {
		name string
		s    *recordingStore
		want string
	}{{"global", g, "{p|g=1}"}, {"hybrid", h, "h{p|h=1}"}, {"local", l, "l{p|l=1}"}} {
		if len(tc.s.keys) != 1 || !strings.HasPrefix(tc.s.keys[0], tc.want) {
			t.Errorf("%s store got keys %q, want one starting %q", tc.name, tc.s.keys, tc.want)
		}
	}
	// A batch across placements: the local limit is spent, so the request
	// is denied and the global and hybrid ones are only looked at.
	resp := hs.check(t, Request{Domain: "p", Descriptors: []Descriptor{desc("g", "2"), desc("h", "2"), desc("l", "1")}})
	if resp.OverallCode != CodeOverLimit {
		t.Fatalf("mixed batch with a spent local limit: %v, want OVER_LIMIT", resp.OverallCode)
	}
	resp = hs.check(t, Request{Domain: "p", Descriptors: []Descriptor{desc("g", "2"), desc("h", "2")}})
	if resp.OverallCode != CodeOK {
		t.Fatalf("g=2, h=2 after a denied batch: %v, want OK (the denied batch charged them nothing)", resp.OverallCode)
	}
}

// Sub-counters never admit more than the quota; near the limit they admit
// less (hits land unevenly on the counters). The test measures how much.
func TestSubCountersAccuracy(t *testing.T) {
	t.Parallel() // its own engines and stores
	const quota, windows = 1000, 20
	yaml := `domain: p
descriptors:
  - key: hot
    rate_limit: {unit: hour, requests_per_unit: 1000, sub_counters: 8}
`
	for _, demand := range []int{quota, 2 * quota} {
		total := 0
		for range windows {
			h := newHarness(t, yaml, DefaultConfig())
			admitted := 0
			for range demand {
				if h.check(t, Request{Domain: "p", Descriptors: []Descriptor{desc("hot", "x")}}).OverallCode == CodeOK {
					admitted++
				}
			}
			if admitted > quota {
				t.Fatalf("demand %d: admitted %d, want ≤ %d", demand, admitted, quota)
			}
			if demand == 2*quota && admitted != quota {
				t.Errorf("demand 2×quota: admitted %d, want %d (every counter full)", admitted, quota)
			}
			total += admitted
		}
		loss := 1 - float64(total)/(windows*quota)
		t.Logf("8 sub-counters, quota %d, demand %d in a window: %.1f%% under the quota on average over %d windows", quota, demand, 100*loss, windows)
		if demand == quota && loss > 0.06 {
			t.Errorf("demand = quota: %.1f%% under the quota, want ≤ 6%% (about 3.4%% expected)", 100*loss)
		}
	}
}

type healthyStore struct{ sluice.Store }

func (healthyStore) Health() []stack.NodeHealth {
	return []stack.NodeHealth{{Node: "n1:6379", State: "open"}}
}

// Placed passes the global store's node health through.
func TestPlacedHealth(t *testing.T) {
	p := &compose.Placed{Global: healthyStore{}}
	if h := p.Health(); len(h) != 1 || h[0].Node != "n1:6379" {
		t.Fatalf("Health() = %v, want the global store's one node", h)
	}
	if h := (&compose.Placed{Global: &recordingStore{}}).Health(); h != nil {
		t.Fatalf("Health() over a store without health = %v, want nil", h)
	}
}
