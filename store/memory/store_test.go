package memory_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/stack"
	"github.com/sluice-rl/sluice/store/storetest"
)

func take(t *testing.T, s sluice.Store, key string, l sluice.Limit, cost int64) sluice.Result {
	t.Helper()
	res := make([]sluice.Result, 1)
	if err := s.Take(context.Background(), []sluice.Op{{Key: key, Limit: l, Cost: cost}}, res); err != nil {
		t.Fatalf("Take(%q): %v", key, err)
	}
	return res[0]
}

// Idle keys are forgotten once they are back in their fresh state, and only
// then.
func TestSweepForgetsOnlyFreshKeys(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.Options{Now: clock.Now, SweepInterval: time.Hour})
	defer s.Close()
	for _, a := range stack.Algorithms() {
		l := sluice.Limit{Algorithm: a, Quota: 5, Window: time.Second}
		take(t, s, "busy:"+a.String(), l, 1)
	}
	if got := s.Stats().Keys; got != 7 {
		t.Fatalf("Keys = %d after one hit per algorithm, want 7", got)
	}
	clock.Advance(100 * time.Millisecond) // the buckets refill one hit in 200ms
	s.Sweep()
	if got := s.Stats().Keys; got != 7 {
		t.Errorf("Keys = %d after 0.1s (no key fresh yet), want 7", got)
	}
	clock.Advance(2 * time.Second) // sliding_window needs two windows
	s.Sweep()
	if got := s.Stats(); got.Keys != 0 || got.Swept != 7 {
		t.Errorf("Stats = %+v after every key is fresh, want 0 keys and 7 swept", got)
	}
	// A key dropped while fresh decides as if it had been kept.
	l := sluice.Limit{Algorithm: sluice.GCRA, Quota: 5, Window: time.Second}
	if r := take(t, s, "busy:gcra", l, 1); r.Remaining != 4 {
		t.Errorf("Remaining after the sweep = %d, want 4", r.Remaining)
	}
}

// At the key cap, a flood of new keys evicts idle keys first, then the keys
// closest to fresh, and counts each eviction; the store never grows past
// its cap.
func TestMaxKeys(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.Options{Now: clock.Now, Shards: 1, MaxKeys: 100, SweepInterval: time.Hour})
	defer s.Close()
	long := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1, Window: time.Hour}
	short := sluice.Limit{Algorithm: sluice.GCRA, Quota: 1, Window: time.Second}
	for i := 0; i < 50; i++ {
		take(t, s, fmt.Sprint("mid-window-", i), long, 1) // mid-window for an hour
	}
	for i := 0; i < 50; i++ {
		take(t, s, fmt.Sprint("soon-fresh-", i), short, 1) // fresh after 1s
	}
	clock.Advance(2 * time.Second)
	for i := 0; i < 50; i++ {
		take(t, s, fmt.Sprint("flood-", i), short, 1)
	}
	st := s.Stats()
	if st.Keys > 100 {
		t.Errorf("Keys = %d, want ≤ 100", st.Keys)
	}
	// The idle keys went first: every mid-window key still denies.
	kept := 0
	for i := 0; i < 50; i++ {
		if r := take(t, s, fmt.Sprint("mid-window-", i), long, 0); r.Remaining == 0 {
			kept++
		}
	}
	if kept != 50 {
		t.Errorf("%d of 50 mid-window keys kept while 50 idle keys were there to evict, want all 50", kept)
	}
	if st.Evictions != 0 || st.Swept != 50 {
		t.Errorf("Stats = %+v, want 0 evictions and 50 swept: the idle keys go first", st)
	}
}

// A long flood of new keys at the cap, whose own keys go idle as it runs,
// never resets a key that is mid-window: room comes from the flood's idle
// keys. Once every key is mid-window, new keys evict (the closest to fresh)
// and each eviction is counted; the store never holds more than its cap.
func TestFloodAtCap(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.Options{Now: clock.Now, Shards: 4, MaxKeys: 1000, SweepInterval: time.Hour})
	defer s.Close()
	long := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1000, Window: time.Hour}
	for i := range 500 {
		take(t, s, fmt.Sprint("tenant-", i), long, 1)
	}
	short := sluice.Limit{Algorithm: sluice.GCRA, Quota: 1, Window: 100 * time.Millisecond}
	for i := range 20_000 { // 2 new keys a millisecond, each idle after 100ms
		if i%2 == 0 {
			clock.Advance(time.Millisecond)
		}
		if r := take(t, s, fmt.Sprint("flood-", i), short, 1); !r.Allowed {
			t.Fatalf("flood key %d denied on its first hit", i)
		}
		if k := s.Stats().Keys; i%1000 == 0 && k > 1000 {
			t.Fatalf("Keys = %d, above the cap of 1000", k)
		}
	}
	for i := range 500 {
		if r := take(t, s, fmt.Sprint("tenant-", i), long, 0); r.Remaining != 999 {
			t.Fatalf("tenant-%d: Remaining = %d after the flood, want 999 (its counter was reset)", i, r.Remaining)
		}
	}
	st := s.Stats()
	if st.Evictions != 0 {
		t.Errorf("Evictions = %d during a flood whose own keys went idle, want 0", st.Evictions)
	}
	t.Logf("after a 20,000-key flood: %+v", st)

	// Now a flood that stays mid-window: room must come from evictions.
	for i := range 2000 {
		take(t, s, fmt.Sprint("hour-", i), long, 1)
	}
	st = s.Stats()
	if st.Keys > 1000 {
		t.Errorf("Keys = %d, above the cap of 1000", st.Keys)
	}
	if st.Evictions < 1000 {
		t.Errorf("Evictions = %d after 2000 hour-long keys into a store of 1000, want at least 1000 counted", st.Evictions)
	}
}

// Deciding on an existing key allocates nothing.
func TestZeroAllocs(t *testing.T) {
	s := memory.New(memory.Options{})
	defer s.Close()
	ctx := context.Background()
	for _, a := range stack.Algorithms() {
		ops := []sluice.Op{{Key: "alloc:" + a.String(), Limit: sluice.Limit{Algorithm: a, Quota: 1_000_000, Window: time.Hour}, Cost: 1}}
		if a == sluice.SlidingLog || a == sluice.Concurrency {
			ops[0].Limit.Quota = 100_000 // log state is capped
		}
		res := make([]sluice.Result, 1)
		_ = s.Take(ctx, ops, res) // create the key
		n := testing.AllocsPerRun(100, func() { _ = s.Take(ctx, ops, res) })
		want := 0.0
		if a == sluice.SlidingLog || a == sluice.Concurrency {
			want = 1 // the log grows by an entry (amortized); still no per-lookup allocation
		}
		if n > want {
			t.Errorf("%v: %.1f allocs per Take, want ≤ %.0f", a, n, want)
		}
	}
}

// The default clock is coarse but moves.
func TestCoarseClockAdvances(t *testing.T) {
	s := memory.New(memory.Options{ClockResolution: time.Millisecond})
	defer s.Close()
	l := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1, Window: 20 * time.Millisecond}
	first := take(t, s, "clock", l, 1)
	if !first.Allowed {
		t.Fatalf("first hit denied: %+v", first)
	}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if r := take(t, s, "clock", l, 1); r.Allowed {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("a 20ms window never reopened in a minute: the coarse clock does not advance")
}

// Keys lists the keys that hold state and skips those already back in their
// fresh state, which the sweep would forget.
func TestKeysSkipsFreshKeys(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.Options{Now: clock.Now, SweepInterval: time.Hour})
	defer s.Close()
	take(t, s, "k:short", sluice.Limit{Algorithm: sluice.GCRA, Quota: 1, Window: time.Second}, 1)
	take(t, s, "k:long", sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1, Window: time.Hour}, 1)
	clock.Advance(2 * time.Second)
	got, more, err := s.Keys(context.Background(), "k:", 10)
	if err != nil || more || len(got) != 1 || got[0] != "k:long" {
		t.Errorf("Keys = %q, more %v, %v; want [k:long] (k:short is fresh again)", got, more, err)
	}
}
