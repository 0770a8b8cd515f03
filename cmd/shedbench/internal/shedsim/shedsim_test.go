package shedsim

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice/shed"
)

// overload is the experiment: a backend of capacity C offered 3 × C
// with 10% critical traffic.
func overload(cfg *shed.Config) Scenario {
	return Scenario{Workers: 20, Service: 20 * time.Millisecond, Offered: 3, Mix: Mix10,
		Duration: 12 * time.Second, Warmup: 2 * time.Second, Timeout: time.Second, Seed: 1, Shed: cfg}
}

func unloadedP99(t *testing.T) time.Duration {
	t.Helper()
	s := overload(nil)
	s.Offered = 0.2
	r, err := Run(s)
	if err != nil {
		t.Fatal(err)
	}
	return r.P99
}

func TestOverload(t *testing.T) {
	base := unloadedP99(t)
	for _, tc := range []struct {
		name string
		cfg  *shed.Config
	}{
		{"adaptive", &shed.Config{Adaptive: &shed.AdaptiveConfig{}}},
		{"worker", &shed.Config{Worker: &shed.WorkerConfig{MaxInFlight: 25}}},
		{"adaptive+worker", &shed.Config{Adaptive: &shed.AdaptiveConfig{}, Worker: &shed.WorkerConfig{MaxInFlight: 40}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := overload(tc.cfg)
			r, err := Run(s)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Classes[shed.Critical].SuccessRatio(); got < 0.99 {
				t.Errorf("critical success %.4f, want ≥ 0.99", got)
			}
			if r.P99 > 2*base {
				t.Errorf("admitted p99 %v, want ≤ 2 × unloaded p99 %v", r.P99, base)
			}
			if got := r.Goodput / s.Capacity(); got < 0.9 {
				t.Errorf("goodput %.0f/s is %.3f of capacity, want ≥ 0.9", r.Goodput, got)
			}
			// Lowest first: each class succeeds at most as often as the class above it.
			for i := 1; i < len(shed.Priorities()); i++ {
				lo, hi := shed.Priorities()[i-1], shed.Priorities()[i]
				if r.Classes[lo].SuccessRatio() > r.Classes[hi].SuccessRatio() {
					t.Errorf("%v succeeded %.3f, more than %v %.3f", lo, r.Classes[lo].SuccessRatio(), hi, r.Classes[hi].SuccessRatio())
				}
			}
		})
	}
	t.Run("none", func(t *testing.T) {
		r, err := Run(overload(nil))
		if err != nil {
			t.Fatal(err)
		}
		// Without shedding the queue grows without bound: nearly every
		// request times out, critical ones too.
		if got := r.Classes[shed.Critical].SuccessRatio(); got > 0.2 {
			t.Errorf("without shedding critical success %.3f, want the collapse (≤ 0.2)", got)
		}
		if got := r.Goodput / overload(nil).Capacity(); got > 0.2 {
			t.Errorf("without shedding goodput %.3f of capacity, want the collapse (≤ 0.2)", got)
		}
	})
}

func TestStepFollows(t *testing.T) {
	s := overload(&shed.Config{Adaptive: &shed.AdaptiveConfig{}})
	s.StepAt, s.StepWorkers, s.Bucket = 6*time.Second, 10, 250*time.Millisecond
	r, err := Run(s)
	if err != nil {
		t.Fatal(err)
	}
	limitAt := func(at time.Duration) int { return r.Series[int(at/s.Bucket)].Limit }
	before, after := limitAt(5*time.Second), limitAt(9*time.Second)
	if before < 20 {
		t.Fatalf("limit before the step %d, want ≥ 20 (the workers)", before)
	}
	// Within 2 s of the halving the limit has fallen by a third or more and
	// stays near the new capacity.
	for at := 8 * time.Second; at < 12*time.Second; at += s.Bucket {
		if l := limitAt(at); l > before*2/3 || l < 10 {
			t.Errorf("limit at %v is %d; before the step %d, want in [10, %d]", at, l, before, before*2/3)
		}
	}
	for at := 8 * time.Second; at < 12*time.Second; at += time.Second {
		if g := r.Series[int(at/s.Bucket)].Goodput; g < 0.8*500 {
			t.Errorf("goodput at %v is %.0f/s, want ≥ 80%% of the new capacity 500/s", at, g)
		}
	}
	t.Logf("limit %d before, %d after", before, after)
}

func TestDeterministic(t *testing.T) {
	a, _ := Run(overload(&shed.Config{Adaptive: &shed.AdaptiveConfig{}}))
	b, _ := Run(overload(&shed.Config{Adaptive: &shed.AdaptiveConfig{}}))
	if a.Total() != b.Total() || a.P99 != b.P99 {
		t.Errorf("two runs of one seed differ: %+v %v and %+v %v", a.Total(), a.P99, b.Total(), b.P99)
	}
}
