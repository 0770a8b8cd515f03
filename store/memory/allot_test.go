package memory_test

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/stack"
	"github.com/sluice-rl/sluice/store/storetest"
)

// The allotment conformance suite (the same one the Redis store runs).
func TestAllotConformance(t *testing.T) {
	storetest.RunAllot(t, func(t *testing.T, c *storetest.Clock) stack.Allotter {
		s := memory.New(memory.Options{Now: c.Now})
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// A key whose allotments are all given back is fresh again, and swept.
func TestAllotGiveBackFreesTheKey(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.Options{Now: clock.Now, SweepInterval: time.Hour})
	defer s.Close()
	fw := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 10, Window: time.Minute}
	gc := sluice.Limit{Algorithm: sluice.GCRA, Quota: 10, Window: time.Minute}
	out := make([]stack.Allotment, 2)
	ctx := t.Context()
	if err := s.Allot(ctx, []stack.AllotRequest{{Key: "f", Limit: fw, Want: 4, Split: 1}, {Key: "g", Limit: gc, Want: 4, Split: 1}}, out); err != nil {
		t.Fatal(err)
	}
	if got := s.Stats().Keys; got != 2 {
		t.Fatalf("Keys = %d after two grants, want 2", got)
	}
	give := []stack.AllotRequest{{Key: "f", Limit: fw, Give: 4, Epoch: out[0].Epoch}, {Key: "g", Limit: gc, Give: 4}}
	if err := s.Allot(ctx, give, out); err != nil {
		t.Fatal(err)
	}
	if got := s.Stats().Keys; got != 0 {
		t.Errorf("Keys = %d after every grant was given back, want 0 (fresh keys are deleted)", got)
	}
}
