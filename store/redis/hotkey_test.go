package redis

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
)

// TestHotKeyExpiry fills a sliding_log and a concurrency key of quota
// 10,000, then expires 8,000 entries at once (expireMost): the calls that
// follow each remove a bounded number of them (logPrune), counted in Redis
// (ZCARD), not timed. Before the log state was kept in O(log n) per op, one
// call on such a key read and removed all its expired entries (0.5s for
// 80,000). 8,000 expired entries are far more than the five looks may
// remove (5 × logPrune = 1,280), so a call that removed them all fails as
// it did at 100,000, the size this test filled until the fill (one Take per
// entry, most of the package's CPU after the conformance suites) was cut;
// SLUICE_HOTKEY_QUOTA=100000 fills that size again. The Redis time a hot
// key adds to other keys' calls is measured by BenchmarkHotKeyIsolation
// (quota 100,000).
func TestHotKeyExpiry(t *testing.T) {
	t.Parallel() // its own server and fake clocks: CPU, beside the tests that wait
	quota := int64(10_000)
	if v := os.Getenv("SLUICE_HOTKEY_QUOTA"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 10*logPrune {
			t.Fatalf("SLUICE_HOTKEY_QUOTA=%q: want a number of at least %d", v, 10*logPrune)
		}
		quota = n
	}
	if testing.Short() {
		t.Skipf("fills keys of %d entries", quota)
	}
	srv := redistest.Start(t)
	for _, a := range []sluice.Algorithm{sluice.SlidingLog, sluice.Concurrency} {
		t.Run(a.String(), func(t *testing.T) {
			large := fillKey(t, t, srv.URL(), "hot", sluice.Limit{Algorithm: a, Quota: quota, Window: time.Minute})
			expireMost(t, srv, large)
		})
	}
}

// BenchmarkHotKeyIsolation measures what a full hot sliding_log or
// concurrency key (quota 100,000, at its limit, hammered) adds to the p99
// Redis time of other keys' script calls on the same Redis.
//
// Redis runs one command at a time, so what a hot key adds to another key's
// latency is the time of the script calls it waits behind. SLOWLOG with a
// threshold of 0 records the execution time of every script call. Each
// iteration runs the same traffic on other keys three times: alone, beside
// the same hammering of a full key of quota 10, and beside the full key of
// quota 100,000, and reports the best (lowest) rise of the p99 over the
// iterations: the quota must not matter (rise-vs-quota10 about 0) and the
// issue's bound is 1ms over no hot key (rise-vs-none).
//
//	go test ./store/redis -run '^$' -bench HotKeyIsolation -benchtime 5x
func BenchmarkHotKeyIsolation(b *testing.B) {
	srv := redistest.Start(b)
	for _, args := range [][]string{
		{"CONFIG", "SET", "slowlog-log-slower-than", "0"},
		{"CONFIG", "SET", "slowlog-max-len", "100000"},
	} {
		if _, err := srv.Do(args...); err != nil {
			b.Fatal(err)
		}
	}
	for _, a := range []sluice.Algorithm{sluice.SlidingLog, sluice.Concurrency} {
		b.Run(a.String(), func(b *testing.B) {
			b.ReportAllocs()
			large := fillKey(b, b, srv.URL(), "hot", sluice.Limit{Algorithm: a, Quota: 100_000, Window: time.Minute})
			small := fillKey(b, b, srv.URL(), "hot", sluice.Limit{Algorithm: a, Quota: 10, Window: time.Minute})
			others := newTestStore(b, srv.URL(), nil)
			overSmall, overNone := math.Inf(1), math.Inf(1)
			b.ResetTimer()
			for r := 0; r < b.N; r++ {
				none, noneWall := isolationPhase(b, srv, others, nil)
				base, baseWall := isolationPhase(b, srv, others, small)
				loaded, loadedWall := isolationPhase(b, srv, others, large)
				b.Logf("round %d: p99 Redis time per script call: %v alone, %v beside a full hot %v key of quota 10, %v beside one of quota 100,000 (wall p99 of the other keys' Takes: %v, %v, %v)",
					r+1, none, base, a, loaded, noneWall, baseWall, loadedWall)
				overSmall = min(overSmall, float64(loaded-base))
				overNone = min(overNone, float64(loaded-none))
			}
			b.ReportMetric(overSmall/float64(time.Microsecond), "p99-rise-vs-quota10-µs")
			b.ReportMetric(overNone/float64(time.Microsecond), "p99-rise-vs-none-µs")
		})
	}
}

// isolationPhase runs 2,000 Takes on other keys (gcra and sliding_log, 1,000
// keys, 8 goroutines), beside hot hits on the full key when hot is not nil,
// and returns the p99 Redis time of the script calls meanwhile (from
// SLOWLOG) and the wall p99 of the other keys' Takes.
func isolationPhase(t testing.TB, srv *redistest.Server, others *Store, hot *fullKey) (redisP99, wallP99 time.Duration) {
	t.Helper()
	if _, err := srv.Do("SLOWLOG", "RESET"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	stop := make(chan struct{})
	var hotWG sync.WaitGroup
	var hotTakes atomic.Int64
	if hot != nil {
		for range 4 {
			hotWG.Add(1)
			go func() {
				defer hotWG.Done()
				res := make([]sluice.Result, 1)
				for {
					select {
					case <-stop:
						return
					default:
					}
					if err := hot.store.Take(ctx, []sluice.Op{hot.op}, res); err != nil {
						t.Error(err)
						return
					}
					if res[0].Allowed {
						t.Errorf("a hit on the full hot key was allowed: %+v", res[0])
						return
					}
					hotTakes.Add(1)
				}
			}()
		}
	}
	const workers, perWorker = 8, 250
	lat := make([]time.Duration, workers*perWorker)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := make([]sluice.Result, 1)
			for i := range perWorker {
				n := w*perWorker + i
				alg := sluice.GCRA
				if n%2 == 1 {
					alg = sluice.SlidingLog
				}
				op := sluice.Op{Key: fmt.Sprint("other", n%1000), Limit: sluice.Limit{Algorithm: alg, Quota: 100, Window: time.Second}, Cost: 1}
				start := time.Now()
				if err := others.Take(ctx, []sluice.Op{op}, res); err != nil {
					t.Error(err)
					return
				}
				lat[n] = time.Since(start)
			}
		}()
	}
	wg.Wait()
	close(stop)
	hotWG.Wait()
	if hot != nil && hotTakes.Load() == 0 {
		t.Fatal("no hot hit ran beside the other keys")
	}
	calls := scriptCalls(t, srv.Addr())
	if len(calls) == 0 {
		t.Fatal("SLOWLOG recorded no script call")
	}
	return p99(calls), p99(lat)
}

// scriptCalls returns the execution time of every script call (EVALSHA,
// EVAL) in the SLOWLOG of the server at addr.
func scriptCalls(t testing.TB, addr string) []time.Duration {
	t.Helper()
	r, err := redistest.Do(addr, "SLOWLOG", "GET", "-1")
	if err != nil {
		t.Fatal(err)
	}
	var calls []time.Duration
	for _, e := range r.([]any) {
		f, ok := e.([]any)
		if !ok || len(f) < 4 {
			continue
		}
		us, _ := f[2].(int64)
		cmd, _ := f[3].([]any)
		if len(cmd) > 0 {
			if name, _ := cmd[0].(string); strings.HasPrefix(strings.ToUpper(name), "EVAL") {
				calls = append(calls, time.Duration(us)*time.Microsecond)
			}
		}
	}
	return calls
}

func p99(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[(len(d)*99+99)/100-1]
}

// expireMost moves the clock of the full key f (quota Q entries) so that
// 4Q/5 of them have expired at once, then makes five looks at it: each may
// remove only a bounded part of the expired entries (logPrune), so each
// call must cost about what any other does (before, the first read and
// removed all of them in one call: 0.5s for 80,000).
func expireMost(t *testing.T, srv *redistest.Server, f *fullKey) {
	t.Helper()
	q := f.op.Limit.Quota
	expired := q * 4 / 5
	if expired <= 5*logPrune {
		t.Fatalf("expireMost: a quota of %d expires %d entries, no more than 5 looks may remove (%d): it would prove nothing", q, expired, 5*logPrune)
	}
	key := redisKey(f.store.prefix, f.op.Limit.Algorithm, f.op.Key)
	r, err := srv.Do("ZRANGEBYSCORE", key, "0", "+inf", "WITHSCORES", "LIMIT", strconv.FormatInt(expired-1, 10), "1")
	if err != nil || len(r.([]any)) != 2 {
		t.Fatalf("the entry %d of %s: %v, %v", expired, key, r, err)
	}
	at, err := strconv.ParseInt(r.([]any)[1].(string), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if f.op.Limit.Algorithm == sluice.SlidingLog {
		at += f.op.Limit.Window.Microseconds()
	}
	f.clock.us.Store(at)
	look := f.op
	look.Cost = 0
	res := make([]sluice.Result, 1)
	card := func() int64 {
		t.Helper()
		n, err := srv.Do("ZCARD", key)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := n.(int64)
		return c
	}
	before := card()
	first := before
	for i := range 5 {
		if err := f.store.Take(context.Background(), []sluice.Op{look}, res); err != nil {
			t.Fatal(err)
		}
		after := card()
		if removed := before - after; removed > logPrune {
			t.Errorf("look %d after %d of %d entries expired removed %d entries, want ≤ %d (bounded work per call)", i+1, expired, q, removed, logPrune)
		}
		before = after
	}
	if want := q - expired; res[0].Remaining != q-want {
		t.Errorf("after %d of %d entries expired: Remaining %d, want %d", expired, q, res[0].Remaining, q-want)
	}
	if first == before {
		t.Errorf("5 looks after %d of %d entries expired removed none of them (ZCARD %d), want some removed each call", expired, q, first)
	}
	t.Logf("%d of %d entries expired at once: 5 looks removed %d (ZCARD %d → %d)", expired, q, first-before, first, before)
}

// logPrune is LOG_PRUNE in scripts/log.lua: the most expired entries of a
// log one call removes.
const logPrune = 256
