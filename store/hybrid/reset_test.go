package hybrid

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/stack"
	"github.com/sluice-rl/sluice/store/storetest"
)

// fakeResets is a stack.ResetAnnouncer the test speaks through: say calls
// the store's callback, as the Redis store's one goroutine would.
type fakeResets struct {
	mu sync.Mutex
	fn func(keys []string, all bool)
	on chan struct{} // closed once a caller listens
}

func (f *fakeResets) Resets(ctx context.Context, fn func(keys []string, all bool)) error {
	f.mu.Lock()
	f.fn = fn
	close(f.on)
	f.mu.Unlock()
	<-ctx.Done()
	return ctx.Err()
}

func (f *fakeResets) say(keys []string, all bool) {
	<-f.on
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fn(keys, all)
}

// gated is a global store whose Allot, once armed, waits at the gate:
// entered is signalled when it is there, and it goes on when release is.
type gated struct {
	*memory.Store
	mu      sync.Mutex
	armed   bool
	entered chan struct{}
	release chan struct{}
}

func (g *gated) Allot(ctx context.Context, reqs []stack.AllotRequest, out []stack.Allotment) error {
	g.mu.Lock()
	armed := g.armed
	g.armed = false
	g.mu.Unlock()
	err := g.Store.Allot(ctx, reqs, out)
	if armed {
		// Granted in the global store, on its way back: a reset heard now
		// may have run after the grant was taken.
		g.entered <- struct{}{}
		<-g.release
	}
	return err
}

func (g *gated) arm() {
	g.mu.Lock()
	g.armed = true
	g.mu.Unlock()
}

// A reset announced by Options.Resets voids the named key's allotment
// (under every limit), and no other key's; all voids every allotment;
// neither gives units back (the global count stays); a grant on its way
// when its key's reset is heard is dropped on arrival; the key leases
// again on later hits. Stats count it all.
func TestResetsVoid(t *testing.T) {
	clock := storetest.NewClock()
	mem := memory.New(memory.Options{Now: clock.Now})
	t.Cleanup(func() { mem.Close() })
	g := &gated{Store: mem, entered: make(chan struct{}), release: make(chan struct{})}
	ra := &fakeResets{on: make(chan struct{})}
	h, err := New(g, Options{Now: clock.Now, Resets: ra})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	ctx := context.Background()
	l := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1000, Window: time.Hour}
	l2 := sluice.Limit{Algorithm: sluice.GCRA, Quota: 1000, Window: time.Hour}
	hit := func(key string, l sluice.Limit) {
		t.Helper()
		res := make([]sluice.Result, 1)
		if err := h.Take(ctx, []sluice.Op{{Key: key, Limit: l, Cost: 1}}, res); err != nil || !res[0].Allowed {
			t.Fatalf("hit %s: %+v, %v", key, res[0], err)
		}
	}
	lease := func(key string, l sluice.Limit) int64 {
		t.Helper()
		for range 20 {
			hit(key, l)
		}
		h.wg.Wait()
		held := h.heldOf(key, l)
		if held == 0 {
			t.Fatalf("%s: no allotment after 20 hits", key)
		}
		return held
	}
	used := func(key string, l sluice.Limit) int64 {
		t.Helper()
		res := make([]sluice.Result, 1)
		if err := mem.Take(ctx, []sluice.Op{{Key: key, Limit: l}}, res); err != nil {
			t.Fatal(err)
		}
		return stack.Capacity(l) - res[0].Remaining
	}

	a, a2, b := lease("a", l), lease("a", l2), lease("b", l)
	usedA, usedB := used("a", l), used("b", l)
	voided := h.Stats().Voided

	ra.say([]string{"a", "unknown"}, false)
	if got := h.heldOf("a", l) + h.heldOf("a", l2); got != 0 {
		t.Errorf("after a reset of a: %d units held for it, want 0", got)
	}
	if got := h.heldOf("b", l); got != b {
		t.Errorf("after a reset of a: b holds %d, want its %d (not named)", got, b)
	}
	if got := h.Stats().Voided - voided; got != uint64(a+a2) {
		t.Errorf("Voided grew by %d, want a's %d units", got, a+a2)
	}
	if got := used("a", l); got != usedA {
		t.Errorf("global count of a after the void: %d used, want %d (voided units are not given back)", got, usedA)
	}
	if st := h.Stats(); st.Resets != 2 || st.ResetFlushes != 0 {
		t.Errorf("Stats() = %+v, want Resets 2 (a under two limits), ResetFlushes 0", st)
	}

	// The key leases again.
	if held := lease("a", l); held == 0 {
		t.Error("a leases nothing after its reset")
	}

	// Everything.
	voided = h.Stats().Voided
	heldNow := h.heldOf("a", l) + h.heldOf("a", l2) + h.heldOf("b", l)
	ra.say(nil, true)
	if got := h.heldOf("a", l) + h.heldOf("a", l2) + h.heldOf("b", l); got != 0 {
		t.Errorf("after all: %d units held, want 0", got)
	}
	if got := h.Stats().Voided - voided; got != uint64(heldNow) {
		t.Errorf("Voided grew by %d after all, want the %d held", got, heldNow)
	}
	if got := used("b", l); got != usedB {
		t.Errorf("global count of b after all: %d used, want %d (not given back)", got, usedB)
	}
	if st := h.Stats(); st.ResetFlushes != 1 {
		t.Errorf("ResetFlushes = %d, want 1", st.ResetFlushes)
	}

	// A grant on its way when the key's reset is heard.
	lease("c", l)
	ra.say([]string{"c"}, false) // holding nothing, the next hit leases in the foreground
	g.arm()
	done := make(chan error, 1)
	go func() {
		done <- h.Take(ctx, []sluice.Op{{Key: "c", Limit: l, Cost: 1}}, make([]sluice.Result, 1))
	}()
	<-g.entered
	voided = h.Stats().Voided
	ra.say([]string{"c"}, false)
	close(g.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	h.wg.Wait()
	if got := h.heldOf("c", l); got != 0 {
		t.Errorf("c holds %d after a grant that raced its reset, want 0 (dropped on arrival)", got)
	}
	if h.Stats().Voided == voided {
		t.Error("the grant that raced the reset was not counted as voided")
	}
	clock.Advance(time.Millisecond) // later hits: the key leases again
	if held := lease("c", l); held == 0 {
		t.Error("c leases nothing after the reset")
	}
}

// TestVoidedGrantLeasesAgain: a grant voided on arrival (a reset heard
// while it was on its way) leaves the key able to lease on a later hit, on
// a clock that moves between the lease and the hit's second try (each
// reading is a microsecond later, as a real clock is by then). Before, the
// second try marked the key refilling with no lease on its way, and every
// later hit of the key went to the global store.
func TestVoidedGrantLeasesAgain(t *testing.T) {
	clock := storetest.NewClock()
	var mu sync.Mutex
	ticking := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		clock.Advance(time.Microsecond)
		return clock.Now()
	}
	mem := memory.New(memory.Options{Now: ticking})
	t.Cleanup(func() { mem.Close() })
	g := &gated{Store: mem, entered: make(chan struct{}), release: make(chan struct{})}
	ra := &fakeResets{on: make(chan struct{})}
	h, err := New(g, Options{Now: ticking, Resets: ra})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	ctx := context.Background()
	l := sluice.Limit{Algorithm: sluice.GCRA, Quota: 1000, Window: time.Hour}
	hits := func(n int) {
		t.Helper()
		for range n {
			res := make([]sluice.Result, 1)
			if err := h.Take(ctx, []sluice.Op{{Key: "k", Limit: l, Cost: 1}}, res); err != nil || !res[0].Allowed {
				t.Fatalf("hit: %+v, %v", res[0], err)
			}
		}
		h.wg.Wait()
	}
	hits(3) // the first hits of a key are decided globally (tooCold)
	g.arm()
	done := make(chan error, 1)
	go func() {
		done <- h.Take(ctx, []sluice.Op{{Key: "k", Limit: l, Cost: 1}}, make([]sluice.Result, 1))
	}()
	<-g.entered
	ra.say(nil, true) // every allotment void, the one on its way too
	close(g.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	h.wg.Wait()
	if got := h.heldOf("k", l); got != 0 {
		t.Fatalf("k holds %d after a grant that raced a reset of all, want 0", got)
	}
	allots := h.Stats().Allots
	hits(20)
	if got := h.Stats().Allots; got == allots {
		t.Errorf("no lease in 20 hits after the voided grant (Allots stayed %d): the key is stuck on the global store", got)
	}
	if got := h.heldOf("k", l); got == 0 {
		t.Error("k holds nothing after 20 hits: it never leased again")
	}
}
