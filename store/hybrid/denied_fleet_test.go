package hybrid

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/storetest"
)

// A fleet: three instances, each a Redis store and a denied-key cache
// following it (DeniedOptions.Invalidator), sharing one Redis. A monthly
// quota is exhausted and every instance caches the denial for a month; a
// reset or refund through one instance must make the other two decide
// from Redis again (and admit), while a denial no one gave back stays
// answered from memory.

// deniedInstance is one instance of a test fleet.
type deniedInstance struct {
	store *redis.Store
	cache *Denied
}

// newDeniedFleet starts n instances on url sharing one prefix and clock, and
// waits until each cache follows its store's announcements.
func newDeniedFleet(t *testing.T, url string, n int, clock *storetest.Clock) []deniedInstance {
	t.Helper()
	prefix := fmt.Sprintf("fleet%x:", rand.Uint64())
	fl := make([]deniedInstance, n)
	for i := range fl {
		s, err := redis.New(redis.Options{URL: url, Prefix: prefix, Now: clock.Now, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatalf("redis.New(%q) = %v", url, err)
		}
		d := NewDenied(s, DeniedOptions{Now: clock.Now, Invalidator: s})
		t.Cleanup(func() {
			d.Close()
			s.Close()
		})
		fl[i] = deniedInstance{s, d}
	}
	for i := range fl {
		poll(t, fmt.Sprintf("instance %d subscribed", i), func() bool { return fl[i].cache.Stats().Flushes >= 1 })
	}
	return fl
}

// poll checks cond every 10ms for up to 20s: a generous deadline, which
// proves the event happens, not how fast.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// take runs one op through the instance's cache.
func (f deniedInstance) take(t *testing.T, op sluice.Op) sluice.Result {
	t.Helper()
	res := make([]sluice.Result, 1)
	if err := f.cache.Take(context.Background(), []sluice.Op{op}, res); err != nil {
		t.Fatalf("Take(%+v) = %v", op, err)
	}
	return res[0]
}

func TestDeniedFleetGiveBack(t *testing.T) {
	t.Parallel() // its own servers; it mostly waits for announcements
	month := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 5, Window: 30 * 24 * time.Hour}
	servers := []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"single", func(t *testing.T) string { return redistest.Start(t).URL() }},
		{"cluster", func(t *testing.T) string { return redistest.StartCluster(t).URL() }},
	}
	gives := []struct {
		name  string
		op    func(key string) sluice.Op
		freed int // units the give-back frees
	}{
		{"reset", func(key string) sluice.Op { return sluice.Op{Key: key, Limit: month, Action: sluice.Reset} }, 5},
		{"refund", func(key string) sluice.Op {
			return sluice.Op{Key: key, Limit: month, Cost: 3, Action: sluice.Refund}
		}, 3},
	}
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel() // a server of its own
			url := srv.url(t)
			for _, give := range gives {
				t.Run(give.name, func(t *testing.T) {
					clock := storetest.NewClock()
					fl := newDeniedFleet(t, url, 3, clock)
					// Keys in their own slots (no tag), and one that is
					// given back through instance 0, another through 2.
					for k, via := range map[string]int{"customer:" + give.name + ":a": 0, "customer:" + give.name + ":b": 2} {
						fleetGiveBack(t, fl, month, k, via, give.op(k), give.freed)
					}
				})
			}
		})
	}
}

// fleetGiveBack exhausts key, has every instance cache its denial, gives
// units back through instance via, and checks that every instance admits
// again and that the fleet admits exactly freed (≥ len(fl)) units in all.
func fleetGiveBack(t *testing.T, fl []deniedInstance, lim sluice.Limit, key string, via int, give sluice.Op, freed int) {
	t.Helper()
	hit := sluice.Op{Key: key, Limit: lim, Cost: 1}
	for i := range lim.Quota {
		if r := fl[int(i)%len(fl)].take(t, hit); !r.Allowed {
			t.Fatalf("%s: hit %d denied, want allowed", key, i)
		}
	}
	for i, f := range fl {
		if r := f.take(t, hit); r.Allowed || r.RetryAfter <= 0 {
			t.Fatalf("%s: instance %d: %+v, want denied until the window ends", key, i, r)
		}
	}
	// Steady state: the denial is answered from memory, Redis unasked.
	for i, f := range fl {
		ops, hits := f.store.Stats().Ops, f.cache.Stats().Hits
		for range 10 {
			if r := f.take(t, hit); r.Allowed {
				t.Fatalf("%s: instance %d admitted a cached denial", key, i)
			}
		}
		if got := f.cache.Stats().Hits - hits; got != 10 {
			t.Errorf("%s: instance %d: %d cache hits of 10 denied takes, want 10", key, i, got)
		}
		if got := f.store.Stats().Ops - ops; got != 0 {
			t.Errorf("%s: instance %d: %d ops reached Redis while the denial was cached, want 0", key, i, got)
		}
	}
	if r := fl[via].take(t, give); !r.Allowed {
		t.Fatalf("%s: %v through instance %d: %+v, want allowed", key, give.Action, via, r)
	}
	// The instance that gave back admits at once (synchronously); the
	// others once they heard of it.
	admitted := 0
	if r := fl[via].take(t, hit); !r.Allowed {
		t.Fatalf("%s: instance %d denied right after its own %v: %+v", key, via, give.Action, r)
	}
	admitted++
	for i, f := range fl {
		if i == via {
			continue
		}
		poll(t, fmt.Sprintf("%s: instance %d admits after the %v", key, i, give.Action), func() bool {
			if f.take(t, hit).Allowed {
				admitted++
				return true
			}
			return false
		})
	}
	// Then the fleet admits what was freed, no more.
	for i := 0; ; i++ {
		f := fl[i%len(fl)]
		r := f.take(t, hit)
		if !r.Allowed {
			break
		}
		admitted++
		if admitted > freed {
			t.Fatalf("%s: %d admitted after the %v, want at most %d", key, admitted, give.Action, freed)
		}
	}
	if admitted != freed {
		t.Errorf("%s: %d admitted after the %v, want %d", key, admitted, give.Action, freed)
	}
}

// A lost subscription makes the cache drop its denials: after the
// connection is killed, a cached denial is decided by Redis again.
func TestDeniedFleetLostSubscription(t *testing.T) {
	srv := redistest.Start(t)
	clock := storetest.NewClock()
	fl := newDeniedFleet(t, srv.URL(), 1, clock)
	f := fl[0]
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1, Window: 30 * 24 * time.Hour}
	hit := sluice.Op{Key: "lost:a", Limit: lim, Cost: 1}
	f.take(t, hit)
	if r := f.take(t, hit); r.Allowed {
		t.Fatal("second hit of a quota of 1 allowed")
	}
	if got := f.cache.Stats().Keys; got != 1 {
		t.Fatalf("cache holds %d denials, want 1", got)
	}
	flushes := f.cache.Stats().Flushes
	if n, err := srv.Do("CLIENT", "KILL", "TYPE", "pubsub"); err != nil || n != int64(1) {
		t.Fatalf("CLIENT KILL TYPE pubsub = %v, %v; want 1 connection killed", n, err)
	}
	poll(t, "the cache dropped after the loss", func() bool {
		return f.cache.Stats().Flushes > flushes && f.cache.Stats().Keys == 0
	})
	poll(t, "resubscribed", func() bool { return f.store.Stats().Subscriptions >= 2 })
	// The denial is Redis's again: the next hit reaches it (and is denied,
	// the quota being spent).
	ops := f.store.Stats().Ops
	poll(t, "a hit decided by Redis", func() bool {
		res := make([]sluice.Result, 1)
		err := f.cache.Take(context.Background(), []sluice.Op{hit}, res)
		if err == nil && res[0].Allowed {
			t.Fatal("hit allowed after the loss; the quota is spent")
		}
		return err == nil && f.store.Stats().Ops > ops
	})
}
