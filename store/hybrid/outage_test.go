package hybrid

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/redis"
)

// TestOneMasterStopped: a hybrid store over a real 3-master cluster with
// one master SIGSTOPped keeps deciding keys on the two others: 100 fresh
// keys there, hit 4 times each in a row (three global Takes while the key
// is too cold, then a lease), give 400 allowed decisions out of 400 and
// 100 leases,
// while decisions on the stopped master's keys, sent all along from other
// goroutines, fail with the store's timeout or open breaker and none is
// allowed. Each key's slot is found by asking the stopped master before
// the stop (MOVED: another master owns it).
func TestOneMasterStopped(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster; skipped with -short")
	}
	c := redistest.StartCluster(t)
	g, err := redis.New(redis.Options{URL: c.URL(), Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	h, err := New(g, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	victim := c.Servers[0]
	l := sluice.Limit{Algorithm: sluice.TokenBucket, Quota: 1_000_000, Window: time.Second}
	var healthy, stopped []string
	for i := 0; len(healthy) < 100 || len(stopped) < 40; i++ {
		k := fmt.Sprintf("{outage%d}", i)
		_, err := victim.Do("EXISTS", k)
		switch {
		case err == nil:
			stopped = append(stopped, k)
		case strings.Contains(err.Error(), "MOVED"):
			healthy = append(healthy, k)
		default:
			t.Fatalf("EXISTS %s on %s: %v", k, victim.Addr(), err)
		}
	}
	take := func(key string) (bool, error) {
		res := make([]sluice.Result, 1)
		err := h.Take(context.Background(), []sluice.Op{{Key: key, Limit: l, Cost: 1}}, res)
		return res[0].Allowed, err
	}
	// Warm: every master has run the batch script, with allotments.
	for _, k := range append(healthy[:1:1], stopped[0]) {
		for range minHits {
			if ok, err := take(k); err != nil || !ok {
				t.Fatalf("warm %s: allowed %v, %v", k, ok, err)
			}
		}
	}

	victim.Pause()
	paused := true
	defer func() {
		if paused {
			victim.Resume()
		}
	}()
	var victimOK, victimFailed atomic.Int64
	var victimOther atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ok, err := take(stopped[1+i%(len(stopped)-1)]) // never allotted before the stop
				switch {
				case err == nil && ok:
					victimOK.Add(1)
				case errors.Is(err, sluice.ErrStoreTimeout) || errors.Is(err, sluice.ErrStoreUnavailable):
					victimFailed.Add(1)
				default:
					victimOther.Store(fmt.Errorf("allowed %v, err %v", ok, err))
				}
			}
		})
	}
	before := h.Stats()
	decided := 0
	for _, k := range healthy {
		for hit := range minHits {
			if ok, err := take(k); err != nil || !ok {
				t.Errorf("healthy key %s, hit %d, one master stopped: allowed %v, %v; want allowed", k, hit+1, ok, err)
				continue
			}
			decided++
		}
	}
	after := h.Stats()
	for victimFailed.Load() == 0 && victimOther.Load() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	t.Logf("one master stopped: %d of %d healthy-key decisions allowed (%d local, %d global, %d leases); stopped master's keys: %d failed, %d allowed",
		decided, minHits*len(healthy), after.Local-before.Local, after.Global-before.Global, after.Allots-before.Allots, victimFailed.Load(), victimOK.Load())
	if err := victimOther.Load(); err != nil {
		t.Errorf("stopped master's key: %v; want a timeout or an open breaker", err)
	}
	if victimOK.Load() != 0 {
		t.Errorf("stopped master's keys: %d decisions allowed while it was stopped, want 0", victimOK.Load())
	}
	// Each healthy key leased once (its fourth hit); the stopped master's
	// keys leased nothing but may have asked.
	if leases := after.Allots - before.Allots; leases < uint64(len(healthy)-1) {
		t.Errorf("%d leases while one master was stopped, want ≥ %d (one per healthy key but the warm one)", leases, len(healthy)-1)
	}
	victim.Resume()
	paused = false
}

// BenchmarkOneMasterStopped measures, on a real 3-master cluster, the
// decisions per second a hybrid store (Horizon 1s, so that its 100 warm
// keys, each hit 20 times a second, lease about once a second each) makes
// on keys of two masters, offered 2,000 decisions/s paced over 16
// goroutines (a goroutine that falls behind catches up at once, so a
// stall shows as lost throughput), in four interleaved phases of 3s: every master up, the third master
// SIGSTOPped, up again, stopped again. All along, 4 more goroutines send
// that master's keys a decision every millisecond each (they fail while it
// is stopped; the pace is the same in every phase, so they take the same
// CPU). healthy-dec/s-up and healthy-dec/s-stopped are the mean rates of
// the up and the stopped phases, kept-% the second over the first,
// healthy-failed the healthy-key decisions that failed (all phases),
// leases/s-stopped the allotment requests sent while it was stopped. Run it
// with -benchtime=1x: each iteration is one such measurement.
func BenchmarkOneMasterStopped(b *testing.B) {
	c := redistest.StartCluster(b)
	g, err := redis.New(redis.Options{URL: c.URL()})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	h, err := New(g, Options{Horizon: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	victim := c.Servers[0]
	l := sluice.Limit{Algorithm: sluice.TokenBucket, Quota: 1_000_000, Window: time.Second}
	var healthy, stopped []string
	for i := 0; len(healthy) < 100 || len(stopped) < 100; i++ {
		k := fmt.Sprintf("{bench%d}", i)
		if _, err := victim.Do("EXISTS", k); err == nil {
			stopped = append(stopped, k)
		} else if strings.Contains(err.Error(), "MOVED") {
			healthy = append(healthy, k)
		} else {
			b.Fatal(err)
		}
	}
	take := func(key string) error {
		res := make([]sluice.Result, 1)
		return h.Take(context.Background(), []sluice.Op{{Key: key, Limit: l, Cost: 1}}, res)
	}
	// measure runs 16 goroutines on the healthy keys for d and returns
	// their decisions per second; a failed decision is counted, not a
	// decision (on a loaded host a healthy master can miss the 1s timeout).
	var healthyFailed atomic.Int64
	measure := func(d time.Duration) float64 {
		var n atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		const workers, offered = 16, 2000
		start := time.Now()
		for w := range workers {
			wg.Go(func() {
				interval := time.Second * workers / offered
				next := start.Add(interval * time.Duration(w) / workers)
				for i := w * 7; ; i++ {
					if d := time.Until(next); d > 0 {
						select {
						case <-stop:
							return
						case <-time.After(d):
						}
					} else {
						select {
						case <-stop:
							return
						default:
						}
					}
					next = next.Add(interval)
					if err := take(healthy[i%len(healthy)]); err != nil {
						healthyFailed.Add(1)
						continue
					}
					n.Add(1)
				}
			})
		}
		time.Sleep(d)
		close(stop)
		wg.Wait()
		return float64(n.Load()) / time.Since(start).Seconds()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() {
		close(stop)
		wg.Wait()
	}()
	for w := range 4 {
		wg.Go(func() {
			t := time.NewTicker(time.Millisecond)
			defer t.Stop()
			for i := w; ; i++ {
				select {
				case <-stop:
					return
				case <-t.C:
				}
				_ = take(stopped[i%len(stopped)])
			}
		})
	}
	b.ReportAllocs()
	for range b.N {
		measure(3 * time.Second) // warm: every key leased, rates learnt
		var up, down, leases float64
		for range 2 {
			u := measure(3 * time.Second)
			victim.Pause()
			before := h.Stats().Allots
			d := measure(3 * time.Second)
			l := float64(h.Stats().Allots-before) / 3
			victim.Resume()
			b.Logf("healthy decisions/s: %.0f up, %.0f stopped (%.0f leases/s sent meanwhile, the stopped master's keys' included)", u, d, l)
			up, down, leases = up+u/2, down+d/2, leases+l/2
		}
		b.ReportMetric(up, "healthy-dec/s-up")
		b.ReportMetric(down, "healthy-dec/s-stopped")
		b.ReportMetric(100*down/up, "kept-%")
		b.ReportMetric(float64(healthyFailed.Load()), "healthy-failed")
		b.ReportMetric(leases, "leases/s-stopped")
	}
}
