package compose

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/stack"
	"github.com/sluice-rl/sluice/store/storetest"
)

// Every layer of every composition is a stack.Claimer that claims for
// real: a name is handed out once, then held until its ttl passes (by
// the store's clock: the fake clock of the memory store's, Redis's own
// for Redis), and a layer over a store that cannot claim says
// stack.ErrNoClaimer.
func TestClaimPassThrough(t *testing.T) {
	srv := sharedRedis(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		cfg   func(*storetest.Clock) Config
		redis bool
	}{
		{"memory", func(c *storetest.Clock) Config {
			cfg := DefaultConfig()
			cfg.Memory = memory.Options{Now: c.Now}
			return cfg
		}, false},
		{"redis denied off", func(c *storetest.Clock) Config { return stackConfig(srv.URL(), c, DeniedOff) }, true},
		{"redis denied on", func(c *storetest.Clock) Config { return stackConfig(srv.URL(), c, DeniedOn) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := storetest.NewClock()
			s := newStack(t, tc.cfg(clock))
			for _, l := range s.layers() {
				c, ok := l.st.(stack.Claimer)
				if !ok {
					t.Errorf("%s: no stack.Claimer", l.name)
					continue
				}
				for _, k := range []string{"{c}" + l.name, "h{c}" + l.name, "l{c}" + l.name} {
					if got, err := c.Claim(ctx, k, time.Hour); err != nil || !got {
						t.Errorf("%s: first Claim(%q) = %v, %v; want true", l.name, k, got, err)
					}
					if got, err := c.Claim(ctx, k, time.Hour); err != nil || got {
						t.Errorf("%s: second Claim(%q) = %v, %v; want false (held)", l.name, k, got, err)
					}
				}
			}
			// Expiry: by the fake clock in memory, by Redis's clock there.
			k := "{c}expiring"
			if got, _ := s.Claim(ctx, k, 20*time.Millisecond); !got {
				t.Fatal("Claim of a fresh name: false")
			}
			if tc.redis {
				deadline := time.Now().Add(10 * time.Second)
				for {
					got, err := s.Claim(ctx, k, time.Hour)
					if err != nil {
						t.Fatal(err)
					}
					if got {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("a claim of 20ms still held after 10s")
					}
					time.Sleep(5 * time.Millisecond)
				}
			} else {
				clock.Advance(19 * time.Millisecond)
				if got, _ := s.Claim(ctx, k, time.Hour); got {
					t.Error("memory: claim taken again 19ms into a 20ms claim")
				}
				clock.Advance(time.Millisecond)
				if got, _ := s.Claim(ctx, k, time.Hour); !got {
					t.Error("memory: claim not free once its 20ms passed")
				}
			}
		})
	}
	m := memory.New(memory.Options{})
	t.Cleanup(func() { m.Close() })
	p := &Placed{Global: unlisted{m}, Local: m}
	if _, err := p.Claim(ctx, "{a}", time.Second); !errors.Is(err, stack.ErrNoClaimer) {
		t.Errorf("Placed.Claim over a global store that cannot claim: %v, want stack.ErrNoClaimer", err)
	}
	if got, err := p.Claim(ctx, "l{a}", time.Second); err != nil || !got {
		t.Errorf("Placed.Claim of a local key over a claiming local store = %v, %v; want true", got, err)
	}
	c := &cached{next: unlisted{m}}
	if _, err := c.Claim(ctx, "{a}", time.Second); !errors.Is(err, stack.ErrNoClaimer) {
		t.Errorf("cached.Claim over a store that cannot claim: %v, want stack.ErrNoClaimer", err)
	}
}

// Two instances sharing one Redis (single and Cluster): of many
// concurrent claims of one name from both, exactly one succeeds.
func TestClaimOnceAcrossFleet(t *testing.T) {
	for _, tc := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"single", func(t *testing.T) string { return sharedRedis(t).URL() }},
		{"cluster", func(t *testing.T) string { return redistest.StartCluster(t).URL() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := tc.url(t)
			cfg := stackConfig(url, nil, DeniedAuto)
			a := newStack(t, cfg)
			b := newStack(t, cfg) // the same prefix: one fleet
			ctx := context.Background()
			for round := range 5 {
				key := fmt.Sprintf("{tenant=%x}|r:x|notify=80", rand.Uint64())
				var won atomic.Int64
				var wg sync.WaitGroup
				for i := range 16 {
					s := a
					if i%2 == 1 {
						s = b
					}
					wg.Go(func() {
						got, err := s.Claim(ctx, key, time.Minute)
						if err != nil {
							t.Error(err)
						}
						if got {
							won.Add(1)
						}
					})
				}
				wg.Wait()
				if n := won.Load(); n != 1 {
					t.Errorf("round %d: %d of 16 claims across two instances won, want exactly 1", round, n)
				}
			}
		})
	}
}
