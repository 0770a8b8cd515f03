package stack_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/algorithm"
	"github.com/sluice-rl/sluice/store/stack"
)

// TestCheckOp: CheckOp refuses what a store must not apply, naming the
// problem, and accepts the rest.
func TestCheckOp(t *testing.T) {
	gcra := sluice.Limit{Algorithm: sluice.GCRA, Quota: 10, Window: time.Second}
	conc := sluice.Limit{Algorithm: sluice.Concurrency, Quota: 10, Window: time.Second}
	for _, tc := range []struct {
		name string
		op   sluice.Op
		want string // "" for valid
	}{
		{"take", sluice.Op{Key: "k", Limit: gcra, Cost: 1}, ""},
		{"look", sluice.Op{Key: "k", Limit: gcra}, ""},
		{"charge", sluice.Op{Key: "k", Limit: gcra, Cost: 5, Action: sluice.Charge}, ""},
		{"reset of concurrency", sluice.Op{Key: "k", Limit: conc, Action: sluice.Reset}, ""},
		{"release", sluice.Op{Key: "k", Limit: conc, Release: true, Lease: 3}, ""},
		{"negative cost", sluice.Op{Key: "k", Limit: gcra, Cost: -1}, "must not be negative"},
		{"cost above MaxExact", sluice.Op{Key: "k", Limit: gcra, Cost: algorithm.MaxExact + 1}, "is above"},
		{"invalid limit", sluice.Op{Key: "k", Limit: sluice.Limit{Algorithm: sluice.GCRA, Quota: 1}, Cost: 1}, "window"},
		{"release of gcra", sluice.Op{Key: "k", Limit: gcra, Release: true}, "only for concurrency"},
		{"refund of concurrency", sluice.Op{Key: "k", Limit: conc, Cost: 1, Action: sluice.Refund}, "refund is not for concurrency"},
		{"unknown action", sluice.Op{Key: "k", Limit: gcra, Action: 9}, "unknown action 9"},
		{"release that resets", sluice.Op{Key: "k", Limit: conc, Release: true, Action: sluice.Reset}, "cannot also reset"},
	} {
		err := stack.CheckOp(&tc.op)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: CheckOp = %v, want nil", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: CheckOp = %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

// TestCheckOpAgreesWithValidate: CheckOp's fast check of the limit accepts
// exactly what Limit.Validate accepts, on a grid of limits around every
// bound (windows, quotas, bursts, every algorithm).
func TestCheckOpAgreesWithValidate(t *testing.T) {
	windows := []time.Duration{0, stack.MinWindow - time.Microsecond, stack.MinWindow, time.Second + time.Nanosecond, time.Hour, stack.MaxWindow, stack.MaxWindow + time.Microsecond}
	quotas := []int64{-1, 0, 1, 1000, 1_000_000, algorithm.MaxLogQuota, algorithm.MaxLogQuota + 1, algorithm.MaxExact, algorithm.MaxExact + 1}
	bursts := []int64{-1, 0, 1, 1 << 20, algorithm.MaxExact}
	n := 0
	for _, a := range append(stack.Algorithms(), 0, sluice.Concurrency+1) {
		for _, w := range windows {
			for _, q := range quotas {
				for _, b := range bursts {
					l := sluice.Limit{Algorithm: a, Quota: q, Window: w, Burst: b}
					valid := l.Validate() == nil
					checked := stack.CheckOp(&sluice.Op{Key: "k", Limit: l}) == nil
					if valid != checked {
						t.Errorf("%+v: Validate accepts: %v, CheckOp accepts: %v", l, valid, checked)
					}
					if valid {
						n++
					}
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no valid limit on the grid")
	}
}

// TestLimitHelpers: Capacity, HasBurst and ValidAlgorithm follow the
// algorithms' rules, and FieldErrors finds Validate's problems.
func TestLimitHelpers(t *testing.T) {
	for _, tc := range []struct {
		l     sluice.Limit
		burst bool
		cap   int64
	}{
		{sluice.Limit{Algorithm: sluice.TokenBucket, Quota: 10, Window: time.Second, Burst: 30}, true, 30},
		{sluice.Limit{Algorithm: sluice.GCRA, Quota: 10, Window: time.Second}, true, 10},
		{sluice.Limit{Algorithm: sluice.LeakyBucket, Quota: 10, Window: time.Second, Burst: 4}, true, 4},
		{sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 7, Window: time.Second}, false, 7},
		{sluice.Limit{Algorithm: sluice.SlidingWindow, Quota: 7, Window: time.Second}, false, 7},
		{sluice.Limit{Algorithm: sluice.SlidingLog, Quota: 7, Window: time.Second}, false, 7},
		{sluice.Limit{Algorithm: sluice.Concurrency, Quota: 7, Window: time.Second}, false, 7},
	} {
		if got := stack.HasBurst(tc.l.Algorithm); got != tc.burst {
			t.Errorf("HasBurst(%v) = %v, want %v", tc.l.Algorithm, got, tc.burst)
		}
		if got := stack.Capacity(tc.l); got != tc.cap {
			t.Errorf("Capacity(%v) = %d, want %d", tc.l, got, tc.cap)
		}
		if !stack.ValidAlgorithm(tc.l.Algorithm) {
			t.Errorf("ValidAlgorithm(%v) = false, want true", tc.l.Algorithm)
		}
	}
	if len(stack.Algorithms()) != 7 || stack.ValidAlgorithm(0) || stack.ValidAlgorithm(sluice.Concurrency+1) {
		t.Errorf("Algorithms() = %v; ValidAlgorithm(0), ValidAlgorithm(8) = %v, %v; want 7 algorithms, false, false",
			stack.Algorithms(), stack.ValidAlgorithm(0), stack.ValidAlgorithm(sluice.Concurrency+1))
	}
	err := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: -1, Burst: 3}.Validate()
	var fields []string
	for _, fe := range stack.FieldErrors(err) {
		fields = append(fields, fe.Field)
	}
	if got, want := strings.Join(fields, ","), "window,quota,burst"; got != want {
		t.Errorf("FieldErrors(%v) fields = %s, want %s", err, got, want)
	}
	if fe := stack.FieldErrors(nil); fe != nil {
		t.Errorf("FieldErrors(nil) = %v, want nil", fe)
	}
}

// TestFromDecision converts microseconds to durations and the reason.
func TestFromDecision(t *testing.T) {
	got := stack.FromDecision(algorithm.Decision{Reason: algorithm.Limited, Limit: 10, Remaining: 2, ResetAfter: 1500, RetryAfter: 7, Delay: 3})
	want := sluice.Result{Reason: sluice.ReasonLimited, Limit: 10, Remaining: 2, ResetAfter: 1500 * time.Microsecond, RetryAfter: 7 * time.Microsecond, Delay: 3 * time.Microsecond}
	if got != want {
		t.Errorf("FromDecision = %+v, want %+v", got, want)
	}
	if r := stack.FromDecision(algorithm.Decision{Reason: algorithm.Allowed}); !r.Allowed {
		t.Errorf("FromDecision(allowed) = %+v, want Allowed", r)
	}
}
