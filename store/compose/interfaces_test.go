package compose

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/proctest"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/stack"
	"github.com/sluice-rl/sluice/store/storetest"
)

// layer is one layer of a built stack, by name.
type layer struct {
	name string
	st   sluice.Store
}

// layers lists the stack and every layer in it.
func (s *Stack) layers() []layer {
	out := []layer{{"stack", s}}
	if s.placed != nil {
		out = append(out, layer{"placed", s.placed}, layer{"connecting", s.conn})
	}
	if s.dg != nil {
		out = append(out, layer{"denied(global)", s.dg}, layer{"denied(hybrid)", s.dh})
	}
	return out
}

// Every layer of every composition offers what the engine asks of a store
// (sluice.Store, stack.KeyLister for tenant resets and usage,
// stack.HealthReporter for readiness and metrics, io.Closer for the stack)
// and passes on stack.Allotter, stack.Invalidator and
// stack.ResetAnnouncer; and none lies: a
// call either works on real stores or fails with the sentinel that says
// the store below cannot.
func TestInterfacesPassThrough(t *testing.T) {
	srv := sharedRedis(t)
	ctx := context.Background()
	_, redisInvalidates := any((*redis.Store)(nil)).(stack.Invalidator)
	_, redisAnnounces := any((*redis.Store)(nil)).(stack.ResetAnnouncer)
	for _, tc := range []struct {
		name string
		cfg  func(*storetest.Clock) Config
		// health: the stack reports node health; allot: it leases.
		health, allot bool
	}{
		{"memory", func(c *storetest.Clock) Config {
			cfg := DefaultConfig()
			cfg.Memory = memory.Options{Now: c.Now}
			return cfg
		}, false, true},
		{"redis denied off", func(c *storetest.Clock) Config { return stackConfig(srv.URL(), c, DeniedOff) }, true, true},
		{"redis denied auto", func(c *storetest.Clock) Config { return stackConfig(srv.URL(), c, DeniedAuto) }, true, true},
		{"redis denied on", func(c *storetest.Clock) Config { return stackConfig(srv.URL(), c, DeniedOn) }, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := storetest.NewClock()
			s := newStack(t, tc.cfg(clock))
			lim := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 10, Window: time.Hour}
			keys := []string{"{i}g", "h{i}h", "l{i}l"}
			for _, k := range keys {
				if err := s.Take(ctx, []sluice.Op{{Key: k, Limit: lim, Cost: 1}}, make([]sluice.Result, 1)); err != nil {
					t.Fatal(err)
				}
			}
			if _, ok := any(s).(io.Closer); !ok {
				t.Error("the stack is no io.Closer")
			}
			for _, l := range s.layers() {
				kl, ok := l.st.(stack.KeyLister)
				if !ok {
					t.Errorf("%s: no stack.KeyLister", l.name)
				} else if got, _, err := kl.Keys(ctx, "", 10); err != nil || len(got) == 0 {
					t.Errorf("%s: Keys(\"\", 10) = %q, %v; want the keys taken", l.name, got, err)
				}
				hr, ok := l.st.(stack.HealthReporter)
				switch {
				case !ok:
					t.Errorf("%s: no stack.HealthReporter", l.name)
				case tc.health && len(hr.Health()) == 0:
					t.Errorf("%s: Health() = none, want Redis's node", l.name)
				case !tc.health && hr.Health() != nil:
					t.Errorf("%s: Health() = %v, want nil (an in-process store has no nodes)", l.name, hr.Health())
				}
				if a, ok := l.st.(stack.Allotter); ok {
					out := make([]stack.Allotment, 1)
					err := a.Allot(ctx, []stack.AllotRequest{{Key: "{i}allot", Limit: lim, Want: 1, Split: 1}}, out)
					leases := tc.allot && l.name != "denied(hybrid)" // a hybrid store spends allotments, it leases none
					switch {
					case leases && (err != nil || out[0].Granted != 1):
						t.Errorf("%s: Allot = %+v, %v; want 1 granted", l.name, out[0], err)
					case !leases && !errors.Is(err, ErrNoAllotter):
						t.Errorf("%s: Allot on a store that leases nothing: %v, want ErrNoAllotter", l.name, err)
					}
				} else if l.name != "placed" { // Placed routes ops; a caller leases from the stack
					t.Errorf("%s: no stack.Allotter", l.name)
				}
				inv, ok := l.st.(stack.Invalidator)
				if !ok {
					t.Errorf("%s: no stack.Invalidator", l.name)
				} else {
					cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
					err := inv.Invalidations(cctx, func([]string, bool) {})
					cancel()
					switch {
					case tc.health && redisInvalidates && !errors.Is(err, context.DeadlineExceeded):
						t.Errorf("%s: Invalidations over a Redis store that announces them: %v, want to run until ctx ends", l.name, err)
					case (!tc.health || !redisInvalidates) && !errors.Is(err, ErrNoInvalidator):
						t.Errorf("%s: Invalidations over a store without them: %v, want ErrNoInvalidator", l.name, err)
					}
				}
				ra, ok := l.st.(stack.ResetAnnouncer)
				if !ok {
					t.Errorf("%s: no stack.ResetAnnouncer", l.name)
					continue
				}
				cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				err := ra.Resets(cctx, func([]string, bool) {})
				cancel()
				switch {
				case tc.health && redisAnnounces && !errors.Is(err, context.DeadlineExceeded):
					t.Errorf("%s: Resets over a Redis store that announces them: %v, want to run until ctx ends", l.name, err)
				case (!tc.health || !redisAnnounces) && !errors.Is(err, ErrNoInvalidator):
					t.Errorf("%s: Resets over a store without them: %v, want ErrNoInvalidator", l.name, err)
				}
			}
		})
	}
}

// unlisted hides a store's KeyLister.
type unlisted struct{ sluice.Store }

// A layer over a store that cannot list keys says so with
// stack.ErrNoKeyLister instead of listing nothing.
func TestKeysNoLister(t *testing.T) {
	m := memory.New(memory.Options{})
	t.Cleanup(func() { m.Close() })
	p := &Placed{Global: unlisted{m}, Local: m}
	for _, prefix := range []string{"", "{a}", "h{a}"} {
		if _, _, err := p.Keys(context.Background(), prefix, 10); !errors.Is(err, stack.ErrNoKeyLister) {
			t.Errorf("Placed.Keys(%q) over an unlisted global store: %v, want stack.ErrNoKeyLister", prefix, err)
		}
	}
	if got, _, err := p.Keys(context.Background(), "l{a}", 10); err != nil || len(got) != 0 {
		t.Errorf("Placed.Keys(\"l{a}\") over a listing local store = %q, %v; want none, no error", got, err)
	}
	c := &cached{next: unlisted{m}}
	if _, _, err := c.Keys(context.Background(), "", 10); !errors.Is(err, stack.ErrNoKeyLister) {
		t.Errorf("cached.Keys over an unlisted store: %v, want stack.ErrNoKeyLister", err)
	}
	if !errors.Is(service.ErrNoKeyLister, stack.ErrNoKeyLister) {
		t.Error("service.ErrNoKeyLister is not stack.ErrNoKeyLister: the admin API would not recognise a layer's answer")
	}
}

// While Redis cannot be reached, the stack starts (Background), every op
// fails with sluice.ErrStoreUnavailable, Health says the node is out, and
// Keys and Allot fail the same way rather than answering "nothing".
func TestConnectingUnreachable(t *testing.T) {
	port, err := proctest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	c := stackConfig(fmt.Sprintf("redis://127.0.0.1:%d/0", port), nil, DeniedAuto)
	if _, err := New(c); err == nil {
		t.Fatal("New over an unreachable Redis without Background: no error")
	}
	c.Background = true
	s := newStack(t, c)
	ctx := context.Background()
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1, Window: time.Second}
	if err := s.Take(ctx, []sluice.Op{{Key: "{x}", Limit: lim, Cost: 1}}, make([]sluice.Result, 1)); !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Errorf("Take while connecting: %v, want ErrStoreUnavailable", err)
	}
	if _, _, err := s.Keys(ctx, "", 10); !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Errorf("Keys while connecting: %v, want ErrStoreUnavailable", err)
	}
	if err := s.Allot(ctx, []stack.AllotRequest{{Key: "{x}", Limit: lim, Want: 1}}, make([]stack.Allotment, 1)); !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Errorf("Allot while connecting: %v, want ErrStoreUnavailable", err)
	}
	if h := s.Health(); len(h) != 1 || h[0].State != "open" {
		t.Errorf("Health while connecting = %v, want one open node", h)
	}
	if s.Redis() != nil {
		t.Error("Redis() while connecting is not nil")
	}
}

// The connecting store keeps dialling and passes everything through once
// Redis answers.
func TestConnectingConnects(t *testing.T) {
	srv := sharedRedis(t)
	c := stackConfig(srv.URL(), nil, DeniedAuto)
	c.Background = true
	calls := 0
	c.dial = func(o redis.Options) (*redis.Store, error) {
		if calls++; calls < 3 {
			return nil, errors.New("not yet")
		}
		return redis.New(o)
	}
	c.Logger = slog.New(slog.DiscardHandler)
	s := newStack(t, c)
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1, Window: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for s.Redis() == nil {
		if time.Now().After(deadline) {
			t.Fatal("not connected after 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := s.Take(context.Background(), []sluice.Op{{Key: "{y}", Limit: lim, Cost: 1}}, make([]sluice.Result, 1)); err != nil {
		t.Errorf("Take once connected: %v", err)
	}
}

// The measured faults, through the engine over a default `--store redis`
// stack (denied cache auto, on for a single Redis): a tenant's counters
// are found for a reset and for usage in every placement.
func TestEngineTenantKeys(t *testing.T) {
	srv := sharedRedis(t)
	const yaml = `domain: api
tenant_key: tenant
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 10}
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 5, placement: local}
      - key: path
        rate_limit: {unit: hour, requests_per_unit: 100, placement: hybrid}
`
	snap, err := rules.Parse("api.yaml", []byte(yaml), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, stackConfig(srv.URL(), nil, DeniedAuto))
	cfg := service.DefaultConfig()
	cfg.Fallback = s.Fallback()
	eng, err := service.New(cfg, service.StaticRules{Snapshot: snap}, s, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d := func(kv ...string) service.Descriptor {
		var out service.Descriptor
		for i := 0; i+1 < len(kv); i += 2 {
			out.Entries = append(out.Entries, rules.Entry{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	for _, u := range []string{"ann", "bob"} {
		req := service.Request{Domain: "api", Descriptors: []service.Descriptor{d("tenant", "acme"), d("tenant", "acme", "user", u), d("tenant", "acme", "path", "/"+u)}}
		if resp, err := eng.Check(ctx, req); err != nil || resp.OverallCode != service.CodeOK {
			t.Fatalf("Check: %v, %v", resp.OverallCode, err)
		}
	}
	for _, r := range snap.Rules() {
		if len(r.Path) != 2 {
			continue
		}
		got, _, err := eng.TenantEntries(ctx, r, "acme", 10)
		if err != nil || len(got) != 2 {
			t.Errorf("TenantEntries(%s) = %v, %v; want the 2 counters of acme (usage must not skip them)", r.ID, got, err)
		}
	}
	res, err := eng.ResetTenant(ctx, "acme", service.ResetOptions{})
	if err != nil {
		t.Fatalf("ResetTenant: %v (the admin API answers 501 for ErrNoKeyLister)", err)
	}
	var placed [3]int
	for _, k := range res.Keys {
		switch {
		case strings.HasPrefix(k, "l"):
			placed[0]++
		case strings.HasPrefix(k, "h"):
			placed[1]++
		default:
			placed[2]++
		}
	}
	if placed != [3]int{2, 2, 1} {
		t.Errorf("ResetTenant reset %q: %v local, hybrid, global keys, want [2 2 1]", res.Keys, placed)
	}
}

// Sub-counters in every placement, through the engine over the stack:
// rules with sub_counters spread a counter over several keys (several
// Cluster slots), each with its share of the limit; many goroutines
// checking at four times the quota are admitted exactly the quota for
// global and local, and never more than it for hybrid.
func TestEngineSubCounters(t *testing.T) {
	srv := sharedRedis(t)
	const quota, demand, goroutines = 40, 160, 16
	const yaml = `domain: sub
descriptors:
  - key: g
    rate_limit: {unit: hour, requests_per_unit: 40, sub_counters: 4}
  - key: h
    rate_limit: {unit: hour, requests_per_unit: 40, sub_counters: 4, placement: hybrid}
  - key: l
    rate_limit: {unit: hour, requests_per_unit: 40, sub_counters: 4, placement: local}
`
	snap, err := rules.Parse("sub.yaml", []byte(yaml), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	clock := storetest.NewClock()
	s := newStack(t, stackConfig(srv.URL(), clock, DeniedAuto))
	cfg := service.DefaultConfig()
	cfg.Fallback = s.Fallback()
	eng, err := service.New(cfg, service.StaticRules{Snapshot: snap}, s, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"g", "h", "l"} {
		var admitted, failed atomic.Int64
		var wg sync.WaitGroup
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range demand / goroutines {
					req := service.Request{Domain: "sub", Descriptors: []service.Descriptor{{Entries: []rules.Entry{{Key: key, Value: "hot"}}}}}
					resp, err := eng.Check(context.Background(), req)
					switch {
					case err != nil:
						failed.Add(1)
					case resp.OverallCode == service.CodeOK:
						admitted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		got := admitted.Load()
		if failed.Load() > 0 {
			t.Errorf("%s: %d checks failed", key, failed.Load())
		}
		if got > quota || got == 0 || (key != "h" && got != quota) {
			t.Errorf("%s: %d of %d checks admitted, want %d (hybrid: at most %d)", key, got, demand, quota, quota)
		}
	}
}

// The stack hands the Redis store's announcements to its denied caches: a
// key denied (and remembered) on one instance is admitted there again soon
// after another instance resets it, for placements global and hybrid.
func TestDeniedFollowsFleet(t *testing.T) {
	srv := sharedRedis(t)
	if _, ok := any((*redis.Store)(nil)).(stack.Invalidator); !ok {
		t.Skip("the Redis store announces no invalidations")
	}
	ca := stackConfig(srv.URL(), nil, DeniedOn)
	cb := stackConfig(srv.URL(), nil, DeniedOn)
	cb.Redis.Prefix = ca.Redis.Prefix // one fleet
	a, b := newStack(t, ca), newStack(t, cb)
	ctx := context.Background()
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1, Window: time.Hour}
	take := func(s *Stack, key string, action sluice.Action) sluice.Result {
		t.Helper()
		res := make([]sluice.Result, 1)
		cost := int64(1)
		if action == sluice.Reset {
			cost = 0
		}
		if err := s.Take(ctx, []sluice.Op{{Key: key, Limit: lim, Cost: cost, Action: action}}, res); err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	for _, key := range []string{"{fleet}g", "h{fleet}h"} {
		take(a, key, sluice.Take)
		for i := range 3 {
			if r := take(a, key, sluice.Take); r.Allowed {
				t.Fatalf("%s: take %d over a quota of 1 allowed", key, i+2)
			}
		}
		hits := a.Stats().Denied.Hits
		if hits == 0 {
			t.Fatalf("%s: no denial answered from the cache, nothing to test", key)
		}
		take(b, key, sluice.Reset)
		deadline := time.Now().Add(20 * time.Second)
		for !take(a, key, sluice.Take).Allowed {
			if time.Now().After(deadline) {
				t.Fatalf("%s: still denied on instance a 20s after instance b reset it", key)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if st := a.Stats().Denied; st.Invalidated == 0 {
		t.Errorf("Stats().Denied = %+v, want keys invalidated", st)
	}
}

// A reset done through one instance voids the hybrid allotments other
// instances hold of the key (stack.ResetAnnouncer): two stacks on one
// Redis, instance b leases and holds units of a hybrid key, instance a
// refunds (b keeps its units: a refund makes none unsafe) and then resets
// it; once b heard the reset, the two together admit at most the limit.
// Without the void, b's units taken before the reset would be admitted on
// top of the fresh counter's quota.
func TestResetVoidsFleetAllotments(t *testing.T) {
	srv := sharedRedis(t)
	if _, ok := any((*redis.Store)(nil)).(stack.ResetAnnouncer); !ok {
		t.Fatal("the Redis store announces no resets")
	}
	clock := storetest.NewClock() // one clock: one window for the whole test
	ca := stackConfig(srv.URL(), clock, DeniedOn)
	cb := stackConfig(srv.URL(), clock, DeniedOn)
	cb.Redis.Prefix = ca.Redis.Prefix // one fleet
	a, b := newStack(t, ca), newStack(t, cb)
	ctx := context.Background()
	const key, quota = "h{void}h", 100
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: quota, Window: time.Hour}
	take := func(s *Stack, action sluice.Action, cost int64) sluice.Result {
		t.Helper()
		res := make([]sluice.Result, 1)
		if err := s.Take(ctx, []sluice.Op{{Key: key, Limit: lim, Cost: cost, Action: action}}, res); err != nil {
			t.Fatalf("%v %d: %v", action, cost, err)
		}
		return res[0]
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("gave up after 20s waiting until %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// Both subscribed: the "all" that confirms a subscription voids what
	// is held, and must come before b leases, not pass for the void of
	// the reset.
	waitFor("both hybrid stores follow the announcements", func() bool {
		return a.Stats().Hybrid.ResetFlushes >= 1 && b.Stats().Hybrid.ResetFlushes >= 1
	})
	held := func(s *Stack) int64 {
		h := s.Stats().Hybrid
		return int64(h.Granted) - int64(h.Local) - int64(h.Voided) - int64(h.GivenBack)
	}
	for range 6 { // 3 cold hits decided in Redis, then a lease of 8, spent locally
		if r := take(b, sluice.Take, 1); !r.Allowed {
			t.Fatalf("b: hit denied far from the limit: %+v", r)
		}
	}
	if held(b) <= 0 {
		t.Fatalf("b holds no units after 6 hits (%+v): nothing to void", b.Stats().Hybrid)
	}

	// A refund through a: heard by b's denied caches, and b keeps its units.
	inv, st := b.Stats().Denied.Invalidated, b.Stats().Hybrid
	take(a, sluice.Refund, 1)
	waitFor("b hears the refund", func() bool { return b.Stats().Denied.Invalidated > inv })
	if got := b.Stats().Hybrid; got.Resets != st.Resets || got.Voided != st.Voided {
		t.Errorf("after a refund: b's hybrid stats %+v, want Resets and Voided as before (%+v)", got, st)
	}

	// The reset through a.
	bHeld := held(b)
	take(a, sluice.Reset, 0)
	waitFor("b hears the reset", func() bool { return b.Stats().Hybrid.Resets > st.Resets })
	if got := b.Stats().Hybrid.Voided - st.Voided; got != uint64(bHeld) {
		t.Errorf("b voided %d units on the reset, want the %d it held", got, bHeld)
	}

	// Both instances until both are denied, several times over.
	admitted, quiet := 0, 0
	for round := 0; quiet < 20; round++ {
		if round > 10*quota {
			t.Fatalf("still admitting after %d rounds (%d admitted)", round, admitted)
		}
		denied := 0
		for _, s := range []*Stack{a, b} {
			if take(s, sluice.Take, 1).Allowed {
				admitted++
			} else {
				denied++
			}
		}
		if denied == 2 {
			quiet++
		} else {
			quiet = 0
		}
	}
	t.Logf("after the reset: %d admitted of a limit of %d; a %+v; b %+v", admitted, quota, a.Stats().Hybrid, b.Stats().Hybrid)
	if admitted > quota {
		t.Errorf("the fleet admitted %d after the reset, want at most the limit %d", admitted, quota)
	}
	if admitted < quota/2 {
		t.Errorf("the fleet admitted %d after the reset, want most of the limit %d", admitted, quota)
	}
}
