package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/stack"
	"github.com/sluice-rl/sluice/store/storetest"
)

// stepClock is a test clock in µs that moves by step on every reading, so
// that every Take of a fill gets its own instant (and a sliding_log its own
// entry). It is safe for concurrent use.
type stepClock struct {
	us   atomic.Int64
	step atomic.Int64
}

func newStepClock() *stepClock {
	c := &stepClock{}
	c.us.Store(storetest.Epoch.UnixMicro())
	return c
}

func (c *stepClock) Now() time.Time { return time.UnixMicro(c.us.Add(c.step.Load())) }

// fullKey is one key brought to its limit by fill.
type fullKey struct {
	store  *Store
	clock  *stepClock
	op     sluice.Op
	leases []uint64 // concurrency: the leases held, oldest first
}

// fillKey brings key to its limit l (window a minute, so nothing expires
// while it is used): buckets and windows by one charge of the whole quota,
// sliding_log by quota hits of 1 at distinct instants (one entry each), and
// concurrency by quota leases of 1. It uses many goroutines, so that the
// store batches the fill. The store is closed when owner's test ends.
func fillKey(t, owner testing.TB, url, key string, l sluice.Limit) *fullKey {
	t.Helper()
	c := newStepClock()
	s, err := New(Options{URL: url, Prefix: fmt.Sprintf("f%x:", rand.Uint64()), Timeout: 10 * time.Second, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	owner.Cleanup(func() { s.Close() })
	f := &fullKey{store: s, clock: c, op: sluice.Op{Key: key, Limit: l, Cost: 1}}
	ctx := context.Background()
	if l.Algorithm != sluice.SlidingLog && l.Algorithm != sluice.Concurrency {
		op := f.op
		op.Cost = stack.Capacity(l)
		res := make([]sluice.Result, 1)
		if err := s.Take(ctx, []sluice.Op{op}, res); err != nil || !res[0].Allowed {
			t.Fatalf("fill %v: %+v, %v", l, res[0], err)
		}
		return f
	}
	c.step.Store(l.Window.Microseconds() / l.Quota / 2) // the fill spans half the window
	if l.Algorithm == sluice.Concurrency {
		c.step.Store(1)
	}
	const workers = 64
	var mu sync.Mutex
	var wg sync.WaitGroup
	var next atomic.Int64
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := make([]sluice.Result, 1)
			for next.Add(1) <= l.Quota {
				if err := s.Take(ctx, []sluice.Op{f.op}, res); err != nil || !res[0].Allowed {
					errs <- fmt.Errorf("fill %v: %+v, %v", l, res[0], err)
					return
				}
				if res[0].Lease != 0 {
					mu.Lock()
					f.leases = append(f.leases, res[0].Lease)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	c.step.Store(0)
	return f
}

// commandStats returns the calls and µs Redis spent in script calls
// (EVALSHA and EVAL) since the last CONFIG RESETSTAT, from INFO
// commandstats.
func commandStats(t testing.TB, addr string) (calls, usec int64) {
	t.Helper()
	r, err := redistest.Do(addr, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(r.(string), "\r\n") {
		if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
			continue
		}
		for _, kv := range strings.Split(line[strings.IndexByte(line, ':')+1:], ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				calls += n
			case "usec":
				usec += n
			}
		}
	}
	return calls, usec
}

// BenchmarkRedisTime reports the Redis time of one op for every algorithm
// at quotas 10, 1000 and 100000, on a key at its limit. Each op is one
// script call; redis-µs/op is the mean time Redis spent in them (INFO
// commandstats), redis-p50-µs the median and redis-p99-µs the 99th
// percentile of their times (SLOWLOG, threshold 0): on a shared machine the
// mean carries the moments the server was not scheduled, the median hardly.
// The scenarios:
//
//   - full: a hit of cost 1 on the full key (denied; nothing expires).
//   - flow: the key stays full while traffic flows at exactly its rate:
//     the clock moves window/quota per hit and each hit is admitted as
//     one unit leaves (concurrency: each Take releases the oldest lease
//     and acquires one).
//
// It sets slowlog-log-slower-than to 0 on the server. Run it with a fixed
// count, so that each key is filled once:
//
//	go test ./store/redis -run '^$' -bench RedisTime -benchtime 2000x
func BenchmarkRedisTime(b *testing.B) {
	parent := b
	addr := benchAddr(b)
	for _, args := range [][]string{
		{"CONFIG", "SET", "slowlog-log-slower-than", "0"},
		{"CONFIG", "SET", "slowlog-max-len", "100000"},
	} {
		if _, err := redistest.Do(addr, args...); err != nil {
			b.Fatal(err)
		}
	}
	url := "redis://" + addr + "/0"
	fills := map[string]*fullKey{}
	for _, a := range stack.Algorithms() {
		for _, q := range []int64{10, 1000, 100_000} {
			l := sluice.Limit{Algorithm: a, Quota: q, Window: time.Minute}
			name := fmt.Sprintf("%v/quota=%d", a, q)
			get := func(b *testing.B) *fullKey {
				if f := fills[name]; f != nil {
					return f
				}
				f := fillKey(b, parent, url, "hot", l)
				fills[name] = f
				return f
			}
			b.Run(name+"/full", func(b *testing.B) {
				f := get(b)
				benchRedisTime(b, addr, func(res []sluice.Result) error {
					return f.store.Take(context.Background(), []sluice.Op{f.op}, res[:1])
				})
			})
			b.Run(name+"/flow", func(b *testing.B) {
				f := get(b)
				step := l.Window.Microseconds() / q
				benchRedisTime(b, addr, func(res []sluice.Result) error {
					f.clock.us.Add(step)
					ops := []sluice.Op{f.op}
					if a == sluice.Concurrency {
						ops = []sluice.Op{{Key: f.op.Key, Limit: l, Release: true, Lease: f.leases[0]}, f.op}
						f.leases = f.leases[1:]
					}
					if err := f.store.Take(context.Background(), ops, res[:len(ops)]); err != nil {
						return err
					}
					if r := res[len(ops)-1]; r.Lease != 0 {
						f.leases = append(f.leases, r.Lease)
					}
					return nil
				})
			})
		}
	}
}

// benchRedisTime runs take b.N times, one script call each, and reports
// the Redis time per call.
func benchRedisTime(b *testing.B, addr string, take func([]sluice.Result) error) {
	b.ReportAllocs()
	res := make([]sluice.Result, 2)
	for _, cmd := range [][]string{{"CONFIG", "RESETSTAT"}, {"SLOWLOG", "RESET"}} {
		if _, err := redistest.Do(addr, cmd...); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		if err := take(res); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	calls, usec := commandStats(b, addr)
	if calls != int64(b.N) {
		b.Fatalf("%d script calls for %d Takes, want one each", calls, b.N)
	}
	b.ReportMetric(float64(usec)/float64(calls), "redis-µs/op")
	if d := scriptCalls(b, addr); len(d) > 0 {
		slices.Sort(d)
		b.ReportMetric(float64(d[len(d)/2].Microseconds()), "redis-p50-µs")
		b.ReportMetric(float64(p99(d).Microseconds()), "redis-p99-µs")
	}
}
