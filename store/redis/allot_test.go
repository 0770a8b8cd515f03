package redis

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/storetest"
)

// Allot takes quota exactly as Take counts it: grants respect Keep and
// Split, Takes see granted units as spent, and a give-back counts only in
// its own window.
func TestAllot(t *testing.T) {
	srv := redistest.Start(t)
	clock := storetest.NewClock()
	s, err := New(Options{URL: srv.URL(), Now: clock.Now, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	fw := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 100, Window: time.Second}
	gc := sluice.Limit{Algorithm: sluice.GCRA, Quota: 10, Window: time.Second, Burst: 10}
	allot := func(r sluice.AllotRequest) sluice.Allotment {
		t.Helper()
		out := make([]sluice.Allotment, 1)
		if err := s.Allot(ctx, []sluice.AllotRequest{r}, out); err != nil {
			t.Fatalf("Allot(%+v): %v", r, err)
		}
		return out[0]
	}
	remaining := func(key string, l sluice.Limit) int64 {
		t.Helper()
		res := make([]sluice.Result, 1)
		if err := s.Take(ctx, []sluice.Op{{Key: key, Limit: l}}, res); err != nil {
			t.Fatal(err)
		}
		return res[0].Remaining
	}
	steps := []struct {
		name          string
		req           sluice.AllotRequest
		granted, left int64
	}{
		{"fixed window: want fits", sluice.AllotRequest{Key: "f", Limit: fw, Want: 30, Keep: 10, Split: 1}, 30, 70},
		{"split caps at 1/2 above keep", sluice.AllotRequest{Key: "f", Limit: fw, Want: 100, Keep: 10, Split: 2}, 30, 40},
		{"give back 20 of this window", sluice.AllotRequest{Key: "f", Limit: fw, Give: 20, Epoch: -1, Keep: 10}, 0, 40}, // wrong epoch: ignored
		{"nothing below keep", sluice.AllotRequest{Key: "f", Limit: fw, Want: 50, Keep: 40, Split: 1}, 0, 40},
		{"gcra: burst 10, keep 2, split 2", sluice.AllotRequest{Key: "g", Limit: gc, Want: 10, Keep: 2, Split: 2}, 4, 6},
	}
	var epoch int64
	for _, st := range steps {
		a := allot(st.req)
		if a.Granted != st.granted || a.Remaining != st.left {
			t.Errorf("%s: granted %d remaining %d, want %d %d", st.name, a.Granted, a.Remaining, st.granted, st.left)
		}
		if st.req.Key == "f" {
			epoch = a.Epoch
		}
	}
	if got := remaining("f", fw); got != 40 {
		t.Errorf("Take look after allotments: remaining %d, want 40", got)
	}
	if a := allot(sluice.AllotRequest{Key: "f", Limit: fw, Give: 20, Epoch: epoch}); a.Remaining != 60 {
		t.Errorf("give back 20 in its window: remaining %d, want 60", a.Remaining)
	}
	clock.Advance(time.Second)
	if a := allot(sluice.AllotRequest{Key: "f", Limit: fw, Give: 20, Epoch: epoch}); a.Remaining != 100 {
		t.Errorf("give back after the window ended: remaining %d, want 100 (a fresh window, nothing freed twice)", a.Remaining)
	}
	if err := s.Allot(ctx, []sluice.AllotRequest{{Key: "l", Limit: sluice.PerSecond(sluice.SlidingLog, 5), Want: 1}}, make([]sluice.Allotment, 1)); err == nil {
		t.Error("Allot of a sliding_log limit: nil error, want refused")
	}
}
