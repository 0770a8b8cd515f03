package sluice

import (
	"context"
	"errors"
	"testing"
	"time"
)

// fakeStore is a one-key GCRA/LeakyBucket/Concurrency-agnostic store for the
// Limiter's own logic: it replays canned results and records ops.
type fakeStore struct {
	results []Result
	ops     []Op
}

func (f *fakeStore) Take(_ context.Context, ops []Op, res []Result) error {
	f.ops = append(f.ops, ops...)
	if len(f.results) == 0 {
		return errors.New("no more results")
	}
	res[0], f.results = f.results[0], f.results[1:]
	return nil
}

func TestLimiterWaitN(t *testing.T) {
	gcra := Limit{Algorithm: GCRA, Quota: 1, Window: time.Second}
	tests := []struct {
		name    string
		results []Result
		ctxWait time.Duration // context deadline, 0 = none
		want    error
		slept   []time.Duration
	}{
		{"allowed at once", []Result{{Allowed: true}}, 0, nil, nil},
		{"denied then allowed", []Result{{Reason: ReasonLimited, RetryAfter: 300 * time.Millisecond}, {Allowed: true}}, 0, nil, []time.Duration{300 * time.Millisecond}},
		{"leaky bucket delay", []Result{{Allowed: true, Delay: 50 * time.Millisecond}}, 0, nil, []time.Duration{50 * time.Millisecond}},
		{"cost too high", []Result{{Reason: ReasonCostTooHigh}}, 0, ErrCostExceedsLimit, nil},
		{"past the deadline", []Result{{Reason: ReasonLimited, RetryAfter: time.Hour}}, time.Second, ErrWouldExceedDeadline, nil},
	}
	for _, tt := range tests {
		f := &fakeStore{results: tt.results}
		l, err := NewLimiter(f, gcra)
		if err != nil {
			t.Fatal(err)
		}
		var slept []time.Duration
		l.sleep = func(_ context.Context, d time.Duration) error { slept = append(slept, d); return nil }
		ctx := context.Background()
		if tt.ctxWait > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, tt.ctxWait)
			defer cancel()
		}
		err = l.WaitN(ctx, "k", 1)
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: WaitN = %v, want %v", tt.name, err, tt.want)
		}
		if len(slept) != len(tt.slept) {
			t.Errorf("%s: slept %v, want %v", tt.name, slept, tt.slept)
		}
		for i := range slept {
			if i < len(tt.slept) && slept[i] != tt.slept[i] {
				t.Errorf("%s: slept %v, want %v", tt.name, slept, tt.slept)
			}
		}
	}
}

func TestLimiterAcquireRelease(t *testing.T) {
	conc := Limit{Algorithm: Concurrency, Quota: 1, Window: time.Minute}
	f := &fakeStore{results: []Result{{Allowed: true, Lease: 42}, {Allowed: true}}}
	l, err := NewLimiter(f, conc)
	if err != nil {
		t.Fatal(err)
	}
	release, r, err := l.Acquire(context.Background(), "k")
	if err != nil || !r.Allowed || release == nil {
		t.Fatalf("Acquire = %v, %+v, %v", release != nil, r, err)
	}
	if err := release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.ops[1]; !got.Release || got.Lease != 42 || got.Key != "k" {
		t.Errorf("release op = %+v, want a release of lease 42 on k", got)
	}
	if _, err := NewLimiter(f, Limit{}); err == nil {
		t.Error("NewLimiter with an invalid limit: nil error")
	}
	g, _ := NewLimiter(f, Limit{Algorithm: GCRA, Quota: 1, Window: time.Second})
	if _, _, err := g.Acquire(context.Background(), "k"); err == nil {
		t.Error("Acquire on a gcra limit: nil error")
	}
}
