package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service/promstats"
	"github.com/sluice-rl/sluice/store/stack"
)

// TestStoreErrorReasons: each kind of store error applies the failure mode
// and is counted under its own reason.
func TestStoreErrorReasons(t *testing.T) {
	snap, err := rules.Parse("test.yaml", []byte(testRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		err    error
		reason string
	}{
		{fmt.Errorf("redis: node 10.0.0.1:6379: %w", sluice.ErrStoreUnavailable), "breaker_open"},
		{fmt.Errorf("redis: no reply in 1s: %w", sluice.ErrStoreTimeout), "timeout"},
		{errStoreDown, "error"},
	}
	for _, tt := range tests {
		fs := &failingStore{err: tt.err}
		fs.fail.Store(true)
		h := newHarnessSnap(t, snap, DefaultConfig(), fs)
		for range 3 {
			resp := h.check(t, req(desc("big", "a")))
			if got := resp.Statuses[0].Degraded; got != OutcomeFailedOpen {
				t.Errorf("%s: degraded = %q, want %q", tt.reason, got, OutcomeFailedOpen)
			}
		}
		for _, r := range []string{"breaker_open", "timeout", "error"} {
			want := 0.0
			if r == tt.reason {
				want = 3
			}
			if got := testutil.ToFloat64(h.m.StoreErrors.WithLabelValues(r)); got != want {
				t.Errorf("store error %v: sluice_store_errors_total{reason=%s} = %v, want %v", tt.err, r, got, want)
			}
		}
	}
}

// slowStore answers every Take after delay, from next.
type slowStore struct {
	delay time.Duration
	next  sluice.Store
}

func (s *slowStore) Take(ctx context.Context, ops []sluice.Op, res []sluice.Result) error {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return fmt.Errorf("slow store: %w", ctx.Err())
	}
	return s.next.Take(ctx, ops, res)
}

// TestSlowStoreIsWaitedFor: the engine adds no timeout of its own; a store
// that is merely slow decides, and its limit holds (overload is not
// failure).
func TestSlowStoreIsWaitedFor(t *testing.T) {
	t.Parallel() // its own engine and slow store; it waits for it
	snap, err := rules.Parse("test.yaml", []byte(testRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ss := &slowStore{delay: 60 * time.Millisecond}
	h := newHarnessSnap(t, snap, DefaultConfig(), ss)
	ss.next = h.store
	admitted := 0
	for range 12 { // "big" admits 10 per minute
		resp := h.check(t, req(desc("big", "slow")))
		if d := resp.Statuses[0].Degraded; d != "" {
			t.Fatalf("slow store: degraded = %q, want a decision by the store", d)
		}
		if resp.OverallCode == CodeOK {
			admitted++
		}
	}
	if admitted != 10 {
		t.Errorf("admitted %d of 12 through a slow store, want 10", admitted)
	}
	if got := testutil.ToFloat64(h.m.StoreErrors.WithLabelValues("timeout")); got != 0 {
		t.Errorf("sluice_store_errors_total{reason=timeout} = %v, want 0", got)
	}
}

// TestCallerGivingUpIsNotAStoreFailure: when the caller's context ends
// before the store answers, Check returns the context's error; no failure
// mode applies and nothing counts as a store error or a failed_open
// decision.
func TestCallerGivingUpIsNotAStoreFailure(t *testing.T) {
	snap, err := rules.Parse("test.yaml", []byte(testRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 20*time.Millisecond)
		}, context.DeadlineExceeded},
		{"canceled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(20*time.Millisecond, cancel)
			return ctx, cancel
		}, context.Canceled},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fs := &failingStore{block: true}
			fs.fail.Store(true)
			h := newHarnessSnap(t, snap, DefaultConfig(), fs)
			ctx, cancel := tt.ctx()
			defer cancel()
			_, err := h.eng.Check(ctx, req(desc("big", "a")))
			if !errors.Is(err, tt.want) {
				t.Fatalf("Check with a caller that gave up: err = %v, want one wrapping %v", err, tt.want)
			}
			for _, r := range []string{"breaker_open", "timeout", "error"} {
				if got := testutil.ToFloat64(h.m.StoreErrors.WithLabelValues(r)); got != 0 {
					t.Errorf("sluice_store_errors_total{reason=%s} = %v, want 0", r, got)
				}
			}
			if got := h.decisions("test", "big", OutcomeFailedOpen); got != 0 {
				t.Errorf("failed_open decisions = %v, want 0", got)
			}
			if got := testutil.ToFloat64(h.m.Abandons); got != 1 {
				t.Errorf("sluice_checks_abandoned_total = %v, want 1", got)
			}
		})
	}
}

// healthStore is a store reporting fixed node health.
type healthStore struct {
	sluice.Store
	nodes []stack.NodeHealth
}

func (h *healthStore) Health() []stack.NodeHealth { return h.nodes }

// TestHealthReadyAndMetrics: readiness fails only when every node is out,
// naming them; the per-node breaker gauge follows Health.
func TestHealthReadyAndMetrics(t *testing.T) {
	snap, err := rules.Parse("test.yaml", []byte(testRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hs := &healthStore{}
	h := newHarnessSnap(t, snap, DefaultConfig(), hs)
	hs.Store = h.store
	hs.nodes = []stack.NodeHealth{{Node: "10.0.0.1:6379", State: "closed"}, {Node: "10.0.0.2:6379", State: "open"}}
	if err := h.eng.Ready(context.Background()); err != nil {
		t.Errorf("Ready with one of two nodes out = %v, want nil (the other node's keys are decided)", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(promstats.NewHealthCollector(hs))
	want := `
# HELP sluice_store_breaker_state State of the circuit breaker of each store node: 0 closed, 1 half-open, 2 open.
# TYPE sluice_store_breaker_state gauge
sluice_store_breaker_state{node="10.0.0.1:6379"} 0
sluice_store_breaker_state{node="10.0.0.2:6379"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_store_breaker_state"); err != nil {
		t.Errorf("breaker gauge: %v", err)
	}
	hs.nodes[0].State = "open"
	err = h.eng.Ready(context.Background())
	if err == nil || !strings.Contains(err.Error(), "10.0.0.1:6379") || !strings.Contains(err.Error(), "10.0.0.2:6379") {
		t.Errorf("Ready with every node out = %v, want an error naming both nodes", err)
	}
}

// recordingObserver records Observe calls.
type recordingObserver struct {
	mu    sync.Mutex
	calls []string
}

func (r *recordingObserver) Observe(_ time.Time, domain, rule string, key []byte, denied bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, fmt.Sprintf("%s/%s/%s/%v", domain, rule, key, denied))
}

func TestObserverSeesRuleDecisions(t *testing.T) {
	snap, err := rules.Parse("test.yaml", []byte(testRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	obs := &recordingObserver{}
	cfg := DefaultConfig()
	cfg.Observer = obs
	h := newHarnessSnap(t, snap, cfg, nil)
	h.check(t, req(desc("one", "a")))
	h.check(t, req(desc("one", "a")))                           // denied
	h.check(t, req(desc("shadow", "s"), desc("internal", "x"))) // unlimited: not observed
	h.check(t, req(desc("shadow", "s")))                        // shadow: would deny
	lim := req(desc("ip", "1.2.3.4"))
	lim.Descriptors[0].Limit = &LimitOverride{RequestsPerUnit: 1, Unit: "second"} // overrides: not observed
	h.check(t, lim)
	want := []string{"test/one/one=a/false", "test/one/one=a/true", "test/shadow/shadow=s/false", "test/shadow/shadow=s/true"}
	if fmt.Sprint(obs.calls) != fmt.Sprint(want) {
		t.Errorf("observed %q, want %q", obs.calls, want)
	}
}
