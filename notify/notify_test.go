package notify

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/compose"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/storetest"
)

const fleetRules = `
domain: llm
descriptors:
  - key: team
    rate_limit: {unit: hour, requests_per_unit: 10, notify_at: [50, 80, 100]}
  - key: spend
    rate_limit: {unit: hour, requests_per_unit: 100, settle: after, notify_at: [50, 100]}
`

// instance is one Sluice instance of a fleet: its store stack, engine
// and Notifier.
type instance struct {
	eng *service.Engine
	n   *Notifier
	log *Memory
}

func newInstance(t *testing.T, cfg compose.Config, snap *rules.Snapshot) *instance {
	t.Helper()
	st, err := compose.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return sharedInstance(t, st, snap)
}

// settled waits until each Notifier has handled every crossing it heard,
// and returns the levels the fleet told, "rule@level" → times.
func settled(t *testing.T, fleet ...*instance) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	waitFor(t, "the notifiers to handle what they heard", func() bool {
		clear(out)
		for _, in := range fleet {
			s := in.n.Stats()
			var fired uint64
			for l, c := range s.Fired {
				out[fmt.Sprintf("%s@%d", l.Rule, l.Level)] += c
				fired += c
			}
			if s.Heard != s.Held+fired+s.ClaimErrors+s.Dropped {
				return false
			}
			if s.ClaimErrors+s.Dropped != 0 {
				t.Fatalf("claim errors or drops: %+v", s)
			}
		}
		return true
	})
	return out
}

// Two instances sharing one store tell each level once per period,
// however often their engines report it: concurrent checks from both
// (each level crossed once by the one shared counter), concurrent
// settle-after charges into debt (which report levels again), and the
// same crossing heard by both at once.
func TestFleetFiresOnce(t *testing.T) {
	snap, err := rules.Parse("fleet.yaml", []byte(fleetRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	stores := []struct {
		name string
		cfg  func(t *testing.T) compose.Config
	}{
		{"memory", nil},
		{"redis", func(t *testing.T) compose.Config { return redisConfig(redistest.Start(t).URL()) }},
		{"cluster", func(t *testing.T) compose.Config { return redisConfig(redistest.StartCluster(t).URL()) }},
	}
	for _, sc := range stores {
		t.Run(sc.name, func(t *testing.T) {
			var a, b *instance
			if sc.cfg == nil {
				// One process: two engines over one memory stack.
				cfg := compose.DefaultConfig()
				st, err := compose.New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { st.Close() })
				a, b = sharedInstance(t, st, snap), sharedInstance(t, st, snap)
			} else {
				cfg := sc.cfg(t)
				a, b = newInstance(t, cfg, snap), newInstance(t, cfg, snap)
			}
			ctx := context.Background()
			var wg sync.WaitGroup
			for i := range 24 {
				in := a
				if i%2 == 1 {
					in = b
				}
				wg.Go(func() {
					for _, d := range []service.Descriptor{
						{Entries: []rules.Entry{{Key: "team", Value: "t"}}},
						{Entries: []rules.Entry{{Key: "spend", Value: "s"}}, Hits: ptr(uint64(60))},
					} {
						if _, err := in.eng.Check(ctx, service.Request{Domain: "llm", Descriptors: []service.Descriptor{d}}); err != nil {
							t.Error(err)
						}
					}
				})
			}
			wg.Wait()
			got := settled(t, a, b)
			want := map[string]uint64{"team@50": 1, "team@80": 1, "team@100": 1, "spend@50": 1, "spend@100": 1}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("the fleet told %v, want each level once: %v", got, want)
			}
			held := a.n.Stats().Held + b.n.Stats().Held
			if held == 0 {
				t.Error("no crossing was found claimed: the charges into debt reported none twice?")
			}
			// The same crossing heard by both instances at once.
			c := service.Crossing{Domain: "llm", Rule: "team", Key: "team=u", Level: 80, Limit: 10, Used: 8,
				At: time.Now(), PeriodEnd: time.Now().Add(time.Hour), Claim: fmt.Sprintf("{llm|team=u%x}|r:team|10/3600s|n80", rand.Uint64())}
			a.n.Crossed(c)
			b.n.Crossed(c)
			got = settled(t, a, b)
			if got["team@80"] != 2 {
				t.Errorf("one crossing heard by both instances told %d times, want once more (2 in all)", got["team@80"]-1)
			}
			// What fired is listed by the instance that fired it.
			pa, _, _ := a.n.Page(ctx, "", 100)
			pb, _, _ := b.n.Page(ctx, "", 100)
			if len(pa)+len(pb) != 6 {
				t.Errorf("the logs hold %d + %d fired, want 6", len(pa), len(pb))
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// sharedInstance is an instance over a store stack another shares.
func sharedInstance(t *testing.T, st *compose.Stack, snap *rules.Snapshot) *instance {
	t.Helper()
	log := NewMemory(100)
	n, err := New(Options{Claimer: st, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	scfg := service.DefaultConfig()
	scfg.Notify = n
	eng, err := service.New(scfg, service.StaticRules{Snapshot: snap}, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &instance{eng: eng, n: n, log: log}
}

func redisConfig(url string) compose.Config {
	c := compose.DefaultConfig()
	c.Kind = compose.KindRedis
	c.Redis = redis.Options{URL: url, Prefix: fmt.Sprintf("n%x:", rand.Uint64()), Timeout: 5 * time.Second}
	return c
}

// A level told in one period is told again in the next: the claim lasts
// until the period's end (a fake clock moves the memory store's).
func TestFiresAgainNextPeriod(t *testing.T) {
	snap, err := rules.Parse("fleet.yaml", []byte(fleetRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	clock := storetest.NewClock()
	cfg := compose.DefaultConfig()
	cfg.Memory = memory.Options{Now: clock.Now}
	in := newInstance(t, cfg, snap)
	ctx := context.Background()
	check := func() {
		t.Helper()
		if _, err := in.eng.Check(ctx, service.Request{Domain: "llm", Descriptors: []service.Descriptor{{Entries: []rules.Entry{{Key: "team", Value: "t"}}}}, Hits: 5}); err != nil {
			t.Fatal(err)
		}
	}
	check()
	if got := settled(t, in); got["team@50"] != 1 {
		t.Fatalf("told %v, want team@50 once", got)
	}
	clock.Advance(time.Hour)
	check()
	if got := settled(t, in); got["team@50"] != 2 {
		t.Errorf("told %v after the hour passed, want team@50 twice", got)
	}
	page, next, err := in.n.Page(ctx, "", 1)
	if err != nil || len(page) != 1 || next == "" {
		t.Fatalf("Page(limit 1) = %v, %q, %v; want one and a cursor", page, next, err)
	}
	older, next2, err := in.n.Page(ctx, next, 10)
	if err != nil || len(older) != 1 || next2 != "" || !older[0].FiredAt.Before(page[0].FiredAt) {
		t.Errorf("the next page = %v, %q, %v; want the older firing and no cursor", older, next2, err)
	}
	if page[0].ID == older[0].ID {
		t.Error("two periods' firings have one ID")
	}
}

// A full queue drops crossings and counts them; Crossed never blocks.
func TestNotifierQueueFull(t *testing.T) {
	m := memory.New(memory.Options{})
	t.Cleanup(func() { m.Close() })
	gate := &gated{Claimer: m, hold: make(chan struct{}), in: make(chan struct{}, 8)}
	n, err := New(Options{Claimer: gate, Queue: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	c := service.Crossing{Domain: "d", Rule: "r", Level: 50, At: time.Now(), PeriodEnd: time.Now().Add(time.Hour)}
	for i := range 6 {
		c.Claim = fmt.Sprint("{k}", i)
		n.Crossed(c)
		if i == 0 {
			<-gate.in // the first is being claimed, held
		}
	}
	if s := n.Stats(); s.Dropped != 3 || s.Heard != 6 {
		t.Errorf("stats %+v, want 6 heard, 3 dropped (2 queued behind the one held)", s)
	}
	close(gate.hold)
	waitFor(t, "the queued crossings", func() bool {
		s := n.Stats()
		return s.Fired[Level{"d", "r", 50}] == 3
	})
}

// gated holds each Claim until hold is closed, telling in of each.
type gated struct {
	Claimer interface {
		Claim(ctx context.Context, key string, ttl time.Duration) (bool, error)
	}
	hold chan struct{}
	in   chan struct{}
}

func (g *gated) Claim(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	g.in <- struct{}{}
	<-g.hold
	return g.Claimer.Claim(ctx, key, ttl)
}
