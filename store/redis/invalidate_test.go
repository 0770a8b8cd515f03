package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
)

// heardLog records what an Invalidations caller heard.
type heardLog struct {
	mu    sync.Mutex
	keys  map[string]int
	alls  int
	order []string
}

func (h *heardLog) fn(keys []string, all bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if all {
		h.alls++
		return
	}
	for _, k := range keys {
		h.keys[k]++
		h.order = append(h.order, k)
	}
}

func (h *heardLog) snapshot() (map[string]int, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := make(map[string]int, len(h.keys))
	for k, v := range h.keys {
		m[k] = v
	}
	return m, h.alls
}

// listen calls s.Invalidations until the test ends and returns its log.
func listen(t *testing.T, s *Store) *heardLog {
	t.Helper()
	h := &heardLog{keys: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Invalidations(ctx, h.fn) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != context.Canceled && err != ErrClosed {
			t.Errorf("Invalidations returned %v, want %v", err, context.Canceled)
		}
	})
	return h
}

// waitFor polls cond every 10ms for up to 20s (a generous deadline: it
// proves the event happens, not how fast).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fleetStores opens n stores sharing url and one random prefix, on the
// Redis clock.
func fleetStores(t *testing.T, url string, n int) []*Store {
	t.Helper()
	prefix := fmt.Sprintf("t%x:", rand.Uint64())
	out := make([]*Store, n)
	for i := range out {
		s, err := New(Options{URL: url, Prefix: prefix, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatalf("New(%q) = %v", url, err)
		}
		t.Cleanup(func() { s.Close() })
		out[i] = s
	}
	return out
}

// Refunds of cost > 0 and resets applied through one store are heard by
// another, under the op keys the cache holds (both spellings of a key with
// no tag of its own); charges, takes, refunds of 0 and the actions of a
// denied group are not; the first thing heard is "drop everything".
func TestInvalidationsAnnounce(t *testing.T) {
	t.Parallel() // its own servers; announcements are polled for
	for _, tc := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"single", func(t *testing.T) string { return redistest.Start(t).URL() }},
		{"cluster", func(t *testing.T) string { return redistest.StartCluster(t).URL() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := fleetStores(t, tc.url(t), 2)
			from, to := st[0], st[1]
			h := listen(t, to)
			waitFor(t, "the first drop-everything", func() bool { _, alls := h.snapshot(); return alls >= 1 })
			ctx := context.Background()
			lim := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 5, Window: 30 * 24 * time.Hour}
			log := sluice.Limit{Algorithm: sluice.SlidingLog, Quota: 5, Window: time.Hour}
			take := func(ops ...sluice.Op) {
				t.Helper()
				if err := from.Take(ctx, ops, make([]sluice.Result, len(ops))); err != nil {
					t.Fatalf("Take(%v) = %v", ops, err)
				}
			}
			// Quiet ops first, all in the slot of the marker "{n}end": had
			// any of them been announced, it would be heard before the
			// marker (one node publishes them, in order).
			take(sluice.Op{Key: "{n}take", Limit: lim, Cost: 1})
			take(sluice.Op{Key: "{n}charge", Limit: lim, Cost: 2, Action: sluice.Charge})
			take(sluice.Op{Key: "{n}zero", Limit: lim, Cost: 0, Action: sluice.Refund})
			take( // denied as a group: its reset is not applied
				sluice.Op{Key: "{n}denied-reset", Limit: lim, Action: sluice.Reset},
				sluice.Op{Key: "{n}over", Limit: lim, Cost: 6})
			take(sluice.Op{Key: "{n}end", Limit: lim, Action: sluice.Reset})
			// Then announced ones.
			take(sluice.Op{Key: "bare", Limit: lim, Action: sluice.Reset})
			take(sluice.Op{Key: "{t}refund", Limit: lim, Cost: 1}, sluice.Op{Key: "{t}refund", Limit: lim, Cost: 2, Action: sluice.Refund})
			take(sluice.Op{Key: "{t}log", Limit: log, Cost: 1})
			take(sluice.Op{Key: "{t}log", Limit: log, Cost: 1, Action: sluice.Refund}, sluice.Op{Key: "{t}reset", Limit: lim, Action: sluice.Reset})
			want := []string{"{n}end", "bare", "{bare}", "{t}refund", "{t}log", "{t}reset"}
			waitFor(t, fmt.Sprintf("keys %q", want), func() bool {
				got, _ := h.snapshot()
				for _, k := range want {
					if got[k] == 0 {
						return false
					}
				}
				return true
			})
			got, _ := h.snapshot()
			for _, quiet := range []string{"{n}take", "{n}charge", "{n}zero", "{n}denied-reset", "{n}over"} {
				if got[quiet] != 0 {
					t.Errorf("heard %q %d times, want 0 (it gave nothing back)", quiet, got[quiet])
				}
			}
			if got["{t}refund"] != 1 {
				t.Errorf("heard {t}refund %d times, want 1 (one call, one announcement)", got["{t}refund"])
			}
		})
	}
}

// A lost subscription (its connection killed, or Redis restarted) makes
// every caller drop everything, and the store subscribes again by itself:
// a reset after that is heard.
func TestInvalidationsResubscribe(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose func(t *testing.T, srv *redistest.Server)
	}{
		{"connection killed", func(t *testing.T, srv *redistest.Server) {
			// The connection that subscribed is of type pubsub.
			if n, err := srv.Do("CLIENT", "KILL", "TYPE", "pubsub"); err != nil || n != int64(1) {
				t.Fatalf("CLIENT KILL TYPE pubsub = %v, %v; want 1 connection killed", n, err)
			}
			if _, err := srv.Do("CLIENT", "KILL", "TYPE", "normal"); err != nil {
				t.Fatalf("CLIENT KILL: %v", err)
			}
		}},
		{"redis restarted", func(t *testing.T, srv *redistest.Server) { srv.Restart() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			st := fleetStores(t, srv.URL(), 2)
			h := listen(t, st[1])
			waitFor(t, "the first subscription", func() bool { return st[1].Stats().Subscriptions == 1 })
			_, before := h.snapshot()
			tc.lose(t, srv)
			waitFor(t, "a new subscription", func() bool { return st[1].Stats().Subscriptions >= 2 })
			waitFor(t, "a drop-everything after the loss", func() bool { _, alls := h.snapshot(); return alls > before })
			lim := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 5, Window: time.Hour}
			// The other store's connection may have been killed too: its
			// first call may fail while it redials.
			waitFor(t, "a reset heard after resubscribing", func() bool {
				_ = st[0].Take(context.Background(), []sluice.Op{{Key: "{k}after", Limit: lim, Action: sluice.Reset}}, make([]sluice.Result, 1))
				got, _ := h.snapshot()
				return got["{k}after"] > 0
			})
		})
	}
}

// Several callers share the store's one subscription, each hears
// everything, and a caller whose context ends stops without disturbing the
// others.
func TestInvalidationsCallers(t *testing.T) {
	srv := redistest.Start(t)
	st := fleetStores(t, srv.URL(), 2)
	a := listen(t, st[1])
	ctx, cancel := context.WithCancel(context.Background())
	b := &heardLog{keys: map[string]int{}}
	done := make(chan error, 1)
	go func() { done <- st[1].Invalidations(ctx, b.fn) }()
	waitFor(t, "both callers told to start empty", func() bool {
		_, x := a.snapshot()
		_, y := b.snapshot()
		return x >= 1 && y >= 1
	})
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 5, Window: time.Hour}
	reset := func(key string) {
		t.Helper()
		if err := st[0].Take(context.Background(), []sluice.Op{{Key: key, Limit: lim, Action: sluice.Reset}}, make([]sluice.Result, 1)); err != nil {
			t.Fatal(err)
		}
	}
	reset("{k}one")
	waitFor(t, "both callers hear {k}one", func() bool {
		x, _ := a.snapshot()
		y, _ := b.snapshot()
		return x["{k}one"] == 1 && y["{k}one"] == 1
	})
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("Invalidations after cancel = %v, want %v", err, context.Canceled)
	}
	reset("{k}two")
	waitFor(t, "the remaining caller hears {k}two", func() bool { x, _ := a.snapshot(); return x["{k}two"] == 1 })
	if got := st[1].Stats().Subscriptions; got != 1 {
		t.Errorf("Subscriptions = %d, want 1 (one per store, whatever the callers)", got)
	}
}

// A message with items that do not parse, or Redis keys of another prefix,
// yields only the keys it can read; the "r" trailer marks how many of the
// first items were reset, and a message without it (an older store's)
// names no resets.
func TestDecodeInvalidation(t *testing.T) {
	s := &Store{prefix: "p:"}
	fw := redisKey("p:", sluice.FixedWindow, "x")
	tagged := redisKey("p:", sluice.GCRA, "{t}y")
	item := func(k string) string { return fmt.Sprintf("%d:%s", len(k), k) }
	for _, tc := range []struct {
		msg                  string
		wantKeys, wantResets []string
	}{
		{"", nil, nil},
		{item(fw), []string{"x", "{x}"}, nil},
		{item(fw) + item(tagged), []string{"x", "{x}", "{t}y"}, nil},
		{"8:q:t{abc}" + item(tagged), []string{"{t}y"}, nil}, // another prefix skipped
		{"99:short", nil, nil},
		{"x:abc", nil, nil},
		{item(tagged) + "-1:", []string{"{t}y"}, nil},
		// Resets first, then refunds, then the count of resets.
		{item(fw) + "r1", []string{"x", "{x}"}, []string{"x", "{x}"}},
		{item(tagged) + item(fw) + "r1", []string{"{t}y", "x", "{x}"}, []string{"{t}y"}},
		{item(fw) + item(tagged) + "r2", []string{"x", "{x}", "{t}y"}, []string{"x", "{x}", "{t}y"}},
		{"8:q:t{abc}" + item(tagged) + "r1", []string{"{t}y"}, nil}, // the reset key was another prefix's
		{item(fw) + "r9", []string{"x", "{x}"}, []string{"x", "{x}"}},
		{item(fw) + "r0", []string{"x", "{x}"}, nil},
		{item(fw) + "rx", []string{"x", "{x}"}, nil},
	} {
		keys, resets := s.decodeInvalidation(tc.msg)
		if fmt.Sprint(keys) != fmt.Sprint(tc.wantKeys) || fmt.Sprint(resets) != fmt.Sprint(tc.wantResets) {
			t.Errorf("decodeInvalidation(%q) = %q, %q; want %q, %q", tc.msg, keys, resets, tc.wantKeys, tc.wantResets)
		}
	}
}

// A Resets caller hears the keys Reset ops reset, through any store, and
// not those only refunded (a key both refunded and reset in one call is
// reset); an Invalidations caller of the same store hears both, from the
// same one subscription.
func TestResetsAnnounce(t *testing.T) {
	srv := redistest.Start(t)
	st := fleetStores(t, srv.URL(), 2)
	from, to := st[0], st[1]
	inv := listen(t, to)
	res := &heardLog{keys: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- to.Resets(ctx, res.fn) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != context.Canceled {
			t.Errorf("Resets returned %v, want %v", err, context.Canceled)
		}
	})
	waitFor(t, "both callers told to start empty", func() bool {
		_, x := inv.snapshot()
		_, y := res.snapshot()
		return x >= 1 && y >= 1
	})
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 5, Window: time.Hour}
	take := func(ops ...sluice.Op) {
		t.Helper()
		if err := from.Take(context.Background(), ops, make([]sluice.Result, len(ops))); err != nil {
			t.Fatalf("Take(%v) = %v", ops, err)
		}
	}
	take(sluice.Op{Key: "{r}refund", Limit: lim, Cost: 2}, sluice.Op{Key: "{r}refund", Limit: lim, Cost: 1, Action: sluice.Refund})
	take(sluice.Op{Key: "{r}both", Limit: lim, Cost: 1, Action: sluice.Refund}, sluice.Op{Key: "{r}both", Limit: lim, Action: sluice.Reset},
		sluice.Op{Key: "{r}other", Limit: lim, Cost: 1, Action: sluice.Refund})
	take(sluice.Op{Key: "bare", Limit: lim, Action: sluice.Reset})
	waitFor(t, "the resets", func() bool {
		got, _ := res.snapshot()
		return got["{r}both"] == 1 && got["bare"] == 1 && got["{bare}"] == 1
	})
	waitFor(t, "the invalidations", func() bool {
		got, _ := inv.snapshot()
		return got["{r}refund"] == 1 && got["{r}both"] == 1 && got["{r}other"] == 1 && got["bare"] == 1
	})
	got, _ := res.snapshot()
	for _, refunded := range []string{"{r}refund", "{r}other"} {
		if got[refunded] != 0 {
			t.Errorf("Resets heard %q %d times, want 0 (it was refunded, not reset)", refunded, got[refunded])
		}
	}
	if n := to.Stats().Subscriptions; n != 1 {
		t.Errorf("Subscriptions = %d, want 1 (Invalidations and Resets share one)", n)
	}
}

// An ACL user allowed every key and command but no Pub/Sub channel (Redis
// 7's default for new users) still resets and refunds: the announcement
// is skipped, the write is not refused.
func TestInvalidationsWithoutChannelPermission(t *testing.T) {
	srv := redistest.Start(t)
	if _, err := srv.Do("ACL", "SETUSER", "nochan", "on", ">pw", "~*", "+@all", "resetchannels"); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	s, err := New(Options{URL: "redis://nochan:pw@" + srv.Addr() + "/0", Prefix: fmt.Sprintf("t%x:", rand.Uint64()), Timeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("New as nochan: %v", err)
	}
	defer s.Close()
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 2, Window: time.Hour}
	ctx := context.Background()
	res := make([]sluice.Result, 1)
	for range 2 {
		if err := s.Take(ctx, []sluice.Op{{Key: "k", Limit: lim, Cost: 1}}, res); err != nil || !res[0].Allowed {
			t.Fatalf("take: %+v, %v", res[0], err)
		}
	}
	for _, op := range []sluice.Op{
		{Key: "k", Limit: lim, Cost: 1, Action: sluice.Refund},
		{Key: "k", Limit: lim, Action: sluice.Reset},
	} {
		if err := s.Take(ctx, []sluice.Op{op}, res); err != nil {
			t.Fatalf("%v without channel permission: %v, want applied", op.Action, err)
		}
		if res[0].Remaining < 1 {
			t.Errorf("%v: Remaining %d, want ≥ 1 (applied)", op.Action, res[0].Remaining)
		}
	}
}
