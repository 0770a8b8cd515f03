package service

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service/promstats"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/storetest"
)

// harness is an engine over a memory store with a fake clock.
type harness struct {
	eng   *Engine
	clock *storetest.Clock
	store *memory.Store
	m     *promstats.Metrics
	reg   *prometheus.Registry
}

// newHarness builds an engine from one rule file's YAML.
func newHarness(t testing.TB, yaml string, cfg Config) *harness {
	t.Helper()
	snap, err := rules.Parse("test.yaml", []byte(yaml), rules.Options{})
	if err != nil {
		t.Fatalf("rules.Parse: %v", err)
	}
	return newHarnessSnap(t, snap, cfg, nil)
}

func newHarnessSnap(t testing.TB, snap *rules.Snapshot, cfg Config, store sluice.Store) *harness {
	t.Helper()
	h := &harness{clock: storetest.NewClock(), reg: prometheus.NewRegistry()}
	h.store = memory.New(memory.Options{Now: h.clock.Now})
	t.Cleanup(func() { h.store.Close() })
	if store == nil {
		store = h.store
	}
	h.m = promstats.New(h.reg)
	eng, err := New(cfg, StaticRules{snap}, store, h.m, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.eng = eng
	return h
}

func (h *harness) check(t *testing.T, req Request) Response {
	t.Helper()
	resp, err := h.eng.Check(context.Background(), req)
	if err != nil {
		t.Fatalf("Check(%+v): unexpected error %v", req, err)
	}
	if len(resp.Statuses) != len(req.Descriptors) {
		t.Fatalf("Check: %d statuses for %d descriptors", len(resp.Statuses), len(req.Descriptors))
	}
	return resp
}

// decisions reads sluice_decisions_total for one label set.
func (h *harness) decisions(domain, rule, outcome string) float64 {
	return testutil.ToFloat64(h.m.Decisions.WithLabelValues(domain, rule, outcome))
}

// req builds a request of one-entry-per-pair descriptors: desc("k","v","k2","v2").
func desc(kv ...string) Descriptor {
	var d Descriptor
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, rules.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func u64(v uint64) *uint64 { return &v }

// failingStore fails every Take with err, counting calls; fail can be
// switched off to let calls through to next.
type failingStore struct {
	calls atomic.Int64
	fail  atomic.Bool
	err   error
	next  sluice.Store
	block bool // wait for ctx instead of failing at once
}

var errStoreDown = errors.New("store down (test)")

func (f *failingStore) Take(ctx context.Context, ops []sluice.Op, res []sluice.Result) error {
	f.calls.Add(1)
	if f.fail.Load() {
		if f.block {
			<-ctx.Done()
			return ctx.Err()
		}
		return f.err
	}
	return f.next.Take(ctx, ops, res)
}

// countingStore counts Take calls and ops passed to next.
type countingStore struct {
	mu    sync.Mutex
	calls int
	ops   [][]sluice.Op
	next  sluice.Store
}

func (c *countingStore) Take(ctx context.Context, ops []sluice.Op, res []sluice.Result) error {
	c.mu.Lock()
	c.calls++
	c.ops = append(c.ops, append([]sluice.Op(nil), ops...))
	c.mu.Unlock()
	return c.next.Take(ctx, ops, res)
}

// setOverrides puts o in force as the engine's Config.Overrides, as New
// would have (its overlays are compiled into the next check's policy).
func (h *harness) setOverrides(o Overrides) {
	h.eng.cfg.Overrides = o
	h.eng.overlays = overlaySource(o)
	h.eng.pol.Store(nil)
}
