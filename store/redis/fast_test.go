package redis

import (
	"context"
	"math/rand/v2"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/stack"
	"github.com/sluice-rl/sluice/store/storetest"
)

// TestFastBatch sends batches of one-op Takes straight to the batcher's
// exec, so that they run as one script call of the fast driver
// (scripts/fast.lua), with runs of ops sharing limit, cost and now: of
// fixed and sliding windows, and of every bucket and window algorithm.
// (scripts/one.lua decides the Takes of a call that carries allotments:
// TestAllotOneBatch.) Keys come
// again in a call, costs exceed the quota and the clock goes back; every
// decision is checked against the memory store deciding the same ops one by
// one, in order. (A fake clock comes with a minTTL, so every charge sets
// the TTL; TestFastRedisClock runs the KEEPTTL path.)
func TestFastBatch(t *testing.T) {
	t.Parallel() // its own server and fake clock: CPU, beside the tests that wait
	srv := redistest.Start(t)
	fixed := []sluice.Limit{
		{Algorithm: sluice.FixedWindow, Quota: 3, Window: 10 * time.Millisecond},
		{Algorithm: sluice.FixedWindow, Quota: 7, Window: 999 * time.Microsecond * 7},
		{Algorithm: sluice.FixedWindow, Quota: 1000, Window: 60 * time.Millisecond},
		{Algorithm: sluice.SlidingWindow, Quota: 3, Window: 10 * time.Millisecond},
		{Algorithm: sluice.SlidingWindow, Quota: 7, Window: 999 * time.Microsecond * 7},
		{Algorithm: sluice.SlidingWindow, Quota: 1000, Window: 60 * time.Millisecond},
	}
	mixed := append([]sluice.Limit{
		{Algorithm: sluice.TokenBucket, Quota: 5, Window: 30 * time.Millisecond, Burst: 9},
		{Algorithm: sluice.GCRA, Quota: 3, Window: 10 * time.Millisecond},
		{Algorithm: sluice.LeakyBucket, Quota: 7, Window: 999 * time.Microsecond * 7},
	}, fixed...)
	// Hour-long windows with minTTL 0 (as with the Redis clock): TTLs of
	// up to an hour of real time, so the fast driver's KEEPTTL path (a
	// charge in the window the key holds) runs under the fake clock, which
	// moves minutes at a time.
	hours := []sluice.Limit{
		{Algorithm: sluice.FixedWindow, Quota: 5, Window: time.Hour},
		{Algorithm: sluice.FixedWindow, Quota: 1000, Window: 2 * time.Hour},
		{Algorithm: sluice.SlidingWindow, Quota: 5, Window: time.Hour},
		{Algorithm: sluice.SlidingWindow, Quota: 1000, Window: 2 * time.Hour},
	}
	for _, tc := range []struct {
		name   string
		limits []sluice.Limit
		minTTL string
		tick   time.Duration
		// steps calls of up to maxN ops; above 512 the scripts MGET in
		// parts.
		steps, maxN int
	}{
		{"fast", fixed, "", time.Microsecond, 400, 24},
		{"mixed", mixed, "", time.Microsecond, 400, 24},
		{"fast minTTL 0", hours, "0", 10 * time.Millisecond, 400, 24},
		{"fast large", fixed, "", time.Microsecond, 4, 1200},
		{"mixed large", mixed, "", time.Microsecond, 4, 1200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fastBatch(t, srv, tc.limits, tc.minTTL, tc.tick, tc.steps, tc.maxN)
		})
	}
}

func fastBatch(t *testing.T, srv *redistest.Server, limits []sluice.Limit, minTTL string, tick time.Duration, steps, maxN int) {
	c := storetest.NewClock()
	st := newTestStore(t, srv.URL(), c)
	if minTTL != "" {
		st.minTTL = minTTL
	}
	mem := memory.New(memory.Options{Now: c.Now})
	defer mem.Close()
	keys := diffKeys(2*len(limits), "fast")
	rng := rand.New(rand.NewPCG(7, 11))
	ctx := context.Background()
	calls, ops := 0, 0
	for step := range steps {
		n := 1 + rng.IntN(maxN)
		if maxN > 512 {
			n = maxN - rng.IntN(maxN/4)
		}
		batch := make([]*request, n)
		opss := make([][]sluice.Op, n)
		for i := range n {
			switch x := rng.IntN(10); {
			case x < 2:
				c.Advance(time.Duration(rng.IntN(3000)) * tick)
			case x < 3 && step%7 == 0:
				c.Advance(-time.Duration(rng.IntN(3000)) * tick)
			}
			k := rng.IntN(len(keys))
			l := limits[k%len(limits)]
			cost := int64(rng.IntN(3))
			if rng.IntN(10) == 0 {
				cost = stack.Capacity(l) + 1
			}
			if l.Quota == 1000 {
				cost *= 97
			}
			opss[i] = []sluice.Op{{Key: keys[k], Limit: l, Cost: cost}}
			now := strconv.FormatInt(c.Now().UnixMicro(), 10)
			batch[i] = st.newRequest(opss[i], nil, now, modeDecide)
			if r := batch[i]; !r.one || !r.fast {
				t.Fatalf("request for %+v: one %v fast %v, want both", opss[i][0], r.one, r.fast)
			}
		}
		st.exec(-1, batch)
		calls++
		ops += n
		for i, r := range batch {
			if r.err != nil {
				t.Fatalf("step %d: exec: %v", step, r.err)
			}
			got := make([]sluice.Result, 1)
			r.results(opss[i], got, !r.denied())
			// The memory store at the op's own now: the clock may
			// have moved since.
			at := time.UnixMicro(mustInt(t, r.now))
			want := make([]sluice.Result, 1)
			if err := takeAt(ctx, mem, c, at, opss[i], want); err != nil {
				t.Fatal(err)
			}
			if got[0] != want[0] {
				t.Fatalf("step %d op %d %+v at %v: got %+v, want %+v (memory store)", step, i, opss[i][0], at.UnixMicro(), got[0], want[0])
			}
		}
	}
	if s := st.Stats(); s.Calls != uint64(calls) || s.Ops != uint64(ops) {
		t.Fatalf("Stats calls %d ops %d, want %d and %d (one call per batch)", s.Calls, s.Ops, calls, ops)
	}
}

// takeAt takes ops from mem with the clock c set to at for the call, and
// puts c back.
func takeAt(ctx context.Context, mem *memory.Store, c *storetest.Clock, at time.Time, ops []sluice.Op, res []sluice.Result) error {
	was := c.Now()
	c.Advance(at.Sub(was))
	defer c.Advance(was.Sub(at))
	return mem.Take(ctx, ops, res)
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestFastRedisClock runs the fast driver on Redis TIME (minTTL 0: the
// first charge of a window sets the TTL, later ones keep it), with one run
// of ops per call, and checks the decisions add up (a quota of 5 per window
// admits 5 per key per window, however the calls fall), that every key has
// a TTL no longer than the state lasts (a fixed window's end, a sliding
// window's next window's end), and that the reply's now is Redis's.
func TestFastRedisClock(t *testing.T) {
	srv := redistest.Start(t)
	for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) { fastRedisClock(t, srv, alg) })
	}
}

func fastRedisClock(t *testing.T, srv *redistest.Server, alg sluice.Algorithm) {
	st := newTestStore(t, srv.URL(), nil)
	l := sluice.Limit{Algorithm: alg, Quota: 5, Window: time.Hour}
	lasts := l.Window
	if alg == sluice.SlidingWindow {
		lasts = 2 * l.Window
	}
	keys := diffKeys(3, "fastclock")
	admitted := map[string]int{}
	for range 4 {
		var batch []*request
		var opss [][]sluice.Op
		for i := range 9 {
			ops := []sluice.Op{{Key: keys[i%len(keys)], Limit: l, Cost: 1}}
			opss = append(opss, ops)
			batch = append(batch, st.newRequest(ops, nil, "", modeDecide))
		}
		before := time.Now().UnixMicro()
		st.exec(-1, batch)
		for i, r := range batch {
			if r.err != nil {
				t.Fatal(r.err)
			}
			if r.nowOut < before-int64(time.Minute/time.Microsecond) {
				t.Fatalf("reply now %d, want Redis TIME (about %d)", r.nowOut, before)
			}
			res := make([]sluice.Result, 1)
			r.results(opss[i], res, !r.denied())
			if res[0].Allowed {
				admitted[opss[i][0].Key]++
			}
		}
	}
	// The hour's window may end during the test: then a key admits up to
	// 5 more.
	for _, k := range keys {
		if n := admitted[k]; n < 5 || n > 10 {
			t.Errorf("key %s: %d admitted of 12, want 5 (10 if the hour ended meanwhile)", k, n)
		}
		ttl, err := srv.Do("PTTL", redisKey(st.prefix, alg, k))
		if err != nil {
			t.Fatal(err)
		}
		if ms, _ := ttl.(int64); ms <= 0 || ms > lasts.Milliseconds() {
			t.Errorf("PTTL %s = %v, want in (0, %d]", k, ttl, lasts.Milliseconds())
		}
	}
}

// TestFastConstants checks that the decision codes scripts/fast.lua repeats
// (it stands alone, without lib.lua) are lib.lua's.
func TestFastConstants(t *testing.T) {
	lib, _ := scriptFS.ReadFile("scripts/lib.lua")
	fast, _ := scriptFS.ReadFile("scripts/fast.lua")
	re := regexp.MustCompile(`(?m)^local (ALLOWED|LIMITED|TOO_HIGH) = (\d+)$`)
	want := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(string(lib), -1) {
		want[m[1]] = m[2]
	}
	got := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(string(fast), -1) {
		got[m[1]] = m[2]
	}
	if len(want) != 3 || len(got) != 3 {
		t.Fatalf("lib.lua names %v, fast.lua %v: want ALLOWED, LIMITED and TOO_HIGH in both", want, got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("fast.lua: %s = %s, want lib.lua's %s", k, got[k], v)
		}
	}
	if int64(sluice.ReasonLimited) != 1 {
		t.Errorf("sluice.ReasonLimited = %d, want 1 (parseFast decodes it)", sluice.ReasonLimited)
	}
}
