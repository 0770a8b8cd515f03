package service

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/storetest"
)

// swapRules is a RuleSource whose snapshot a test replaces.
type swapRules struct {
	p atomic.Pointer[rules.Snapshot]
}

func (s *swapRules) Current() *rules.Snapshot { return s.p.Load() }

func TestLastHit(t *testing.T) {
	parse := func(y string) *rules.Snapshot {
		t.Helper()
		s, err := rules.Parse("t.yaml", []byte(y), rules.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ab := parse("domain: one\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: b\n    rate_limit: {unlimited: true}\n")
	a5 := parse("domain: one\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5}\n")
	bOnly := parse("domain: one\ndescriptors:\n  - key: b\n    rate_limit: {unlimited: true}\n")
	clock := storetest.NewClock()
	src := &swapRules{}
	src.p.Store(ab)
	cfg := DefaultConfig()
	cfg.Now = clock.Now
	st := memory.New(memory.Options{Now: clock.Now})
	defer st.Close()
	e, err := New(cfg, src, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	check := func(key string) {
		t.Helper()
		if _, err := e.Check(context.Background(), Request{Domain: "one", Descriptors: []Descriptor{desc(key, "x")}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.LastHit("one", "a"); !got.IsZero() {
		t.Fatalf("LastHit before any check = %v, want zero", got)
	}
	t0 := clock.Now().Truncate(time.Second)
	check("a")
	check("a") // denied: still a hit
	if got := e.LastHit("one", "a"); !got.Equal(t0) {
		t.Errorf("LastHit(one, a) = %v, want %v", got, t0)
	}
	if got := e.LastHit("one", "b"); !got.IsZero() {
		t.Errorf("LastHit(one, b) = %v, want zero (never matched)", got)
	}
	clock.Advance(3 * time.Second)
	check("b") // unlimited rules are hits too
	if got, want := e.LastHit("one", "b"), t0.Add(3*time.Second); !got.Equal(want) {
		t.Errorf("LastHit(one, b) = %v, want %v", got, want)
	}
	src.p.Store(a5) // a's limit changes: its last hit stays
	if got := e.LastHit("one", "a"); !got.Equal(t0) {
		t.Errorf("LastHit(one, a) after its limit changed = %v, want %v", got, t0)
	}
	if got := e.LastHit("one", "b"); !got.IsZero() {
		t.Errorf("LastHit(one, b) after it was removed = %v, want zero", got)
	}
	src.p.Store(bOnly)
	if got := e.LastHit("one", "a"); !got.IsZero() {
		t.Errorf("LastHit(one, a) after it was removed = %v, want zero", got)
	}
	if got := e.LastHit("one", "b"); !got.IsZero() {
		t.Errorf("LastHit(one, b) back after a removal = %v, want zero (a fresh rule)", got)
	}
}
