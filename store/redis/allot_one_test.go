package redis

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/stack"
	"github.com/sluice-rl/sluice/store/storetest"
)

// TestAllotOneBatch sends batches mixing allotments (wants, reserves,
// splits, give-backs of the right and of a wrong epoch) and single Takes
// on fixed_window and gcra keys straight to the batcher's exec, so that
// each runs as one call of scripts/one.lua (allot.lua behind one MGET).
// Keys come again in a call. Every allotment and
// every decision is checked against the memory store doing the same
// requests one by one, in order, at the same instant.
func TestAllotOneBatch(t *testing.T) {
	srv := redistest.Start(t)
	limits := []sluice.Limit{
		{Algorithm: sluice.FixedWindow, Quota: 20, Window: 10 * time.Millisecond},
		{Algorithm: sluice.FixedWindow, Quota: 1000, Window: 60 * time.Millisecond},
		{Algorithm: sluice.GCRA, Quota: 20, Window: 10 * time.Millisecond},
		{Algorithm: sluice.GCRA, Quota: 50, Window: 30 * time.Millisecond, Burst: 80},
	}
	for _, tc := range []struct {
		name        string
		steps, maxN int
	}{
		{"small", 400, 24},
		{"large", 4, 1200}, // above 512 keys one.lua MGETs in parts
	} {
		t.Run(tc.name, func(t *testing.T) {
			allotOneBatch(t, srv, limits, tc.steps, tc.maxN)
		})
	}
}

func allotOneBatch(t *testing.T, srv *redistest.Server, limits []sluice.Limit, steps, maxN int) {
	c := storetest.NewClock()
	st := newTestStore(t, srv.URL(), c)
	mem := memory.New(memory.Options{Now: c.Now})
	defer mem.Close()
	keys := diffKeys(2*len(limits), "allotone")
	epochs := make([]int64, len(keys)) // the last epoch granted, by key
	rng := rand.New(rand.NewPCG(3, 5))
	ctx := context.Background()
	allots, takes := 0, 0
	for step := range steps {
		n := 1 + rng.IntN(maxN)
		if maxN > 512 {
			n = maxN - rng.IntN(maxN/4)
		}
		batch := make([]*request, n)
		which := make([]int, n)
		areqs := make([]stack.AllotRequest, n)
		opss := make([][]sluice.Op, n)
		for i := range n {
			if rng.IntN(10) < 2 {
				c.Advance(time.Duration(rng.IntN(3000)) * time.Microsecond)
			}
			k := rng.IntN(len(keys))
			which[i] = k
			l := limits[k%len(limits)]
			now := strconv.FormatInt(c.Now().UnixMicro(), 10)
			if rng.IntN(3) == 0 {
				opss[i] = []sluice.Op{{Key: keys[k], Limit: l, Cost: int64(rng.IntN(3))}}
				batch[i] = st.newRequest(opss[i], nil, now, modeDecide)
				continue
			}
			q := stack.AllotRequest{Key: keys[k], Limit: l, Want: int64(rng.IntN(12)),
				Keep: int64(rng.IntN(4)), Split: int64(rng.IntN(4))}
			if rng.IntN(3) == 0 {
				q.Give, q.Epoch = int64(1+rng.IntN(6)), epochs[k]
				if rng.IntN(4) == 0 {
					q.Epoch-- // a stale epoch: the give-back is ignored
				}
			}
			areqs[i] = q
			batch[i] = st.newAllotRequest(&areqs[i], redisKey(st.prefix, l.Algorithm, q.Key), now)
		}
		for i, r := range batch {
			if !r.one || (r.fast && opss[i] == nil) {
				t.Fatalf("request %+v: one %v fast %v, want one (and not fast for an allotment)", r.args, r.one, r.fast)
			}
		}
		st.exec(-1, batch)
		for i, r := range batch {
			if r.err != nil {
				t.Fatalf("step %d: exec: %v", step, r.err)
			}
			at := time.UnixMicro(mustInt(t, r.now))
			if opss[i] != nil {
				takes++
				got := make([]sluice.Result, 1)
				r.results(opss[i], got, !r.denied())
				want := make([]sluice.Result, 1)
				if err := takeAt(ctx, mem, c, at, opss[i], want); err != nil {
					t.Fatal(err)
				}
				if got[0] != want[0] {
					t.Fatalf("step %d op %d Take %+v at %d: got %+v, want %+v (memory store)", step, i, opss[i][0], at.UnixMicro(), got[0], want[0])
				}
				continue
			}
			allots++
			v := r.res[:5]
			got := stack.Allotment{Granted: v[0], Remaining: v[1], TTL: time.Duration(v[2]) * time.Microsecond,
				ResetAfter: time.Duration(v[3]) * time.Microsecond, Epoch: v[4]}
			want := make([]stack.Allotment, 1)
			if err := allotAt(ctx, mem, c, at, areqs[i:i+1], want); err != nil {
				t.Fatal(err)
			}
			if got != want[0] {
				t.Fatalf("step %d op %d Allot %+v at %d: got %+v, want %+v (memory store)", step, i, areqs[i], at.UnixMicro(), got, want[0])
			}
			epochs[which[i]] = got.Epoch
		}
	}
	if allots == 0 || takes == 0 {
		t.Fatalf("%d allotments and %d Takes checked, want some of each", allots, takes)
	}
	if s := st.Stats(); s.Calls != uint64(steps) {
		t.Fatalf("Stats calls %d, want %d (one call per batch)", s.Calls, steps)
	}
}

// allotAt allots from mem with the clock c set to at for the call, and
// puts c back.
func allotAt(ctx context.Context, mem *memory.Store, c *storetest.Clock, at time.Time, reqs []stack.AllotRequest, out []stack.Allotment) error {
	was := c.Now()
	c.Advance(at.Sub(was))
	defer c.Advance(was.Sub(at))
	return mem.Allot(ctx, reqs, out)
}

// TestAllotOneCommands: an Allot of one key is one script call of
// scripts/one.lua: one EVALSHA, one MGET and one SET (with PX), no GET and
// (under a test clock) no TIME; under Redis TIME one TIME.
func TestAllotOneCommands(t *testing.T) {
	srv := redistest.Start(t)
	l := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1_000_000, Window: time.Hour}
	for _, tc := range []struct {
		name string
		c    *storetest.Clock
		time int64
	}{
		{"test clock", storetest.NewClock(), 0},
		{"Redis TIME", nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestStore(t, srv.URL(), tc.c)
			out := make([]stack.Allotment, 1)
			ctx := context.Background()
			if err := s.Allot(ctx, []stack.AllotRequest{{Key: "cmds", Limit: l, Want: 5}}, out); err != nil {
				t.Fatal(err) // loads the script
			}
			if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
				t.Fatal(err)
			}
			if err := s.Allot(ctx, []stack.AllotRequest{{Key: "cmds", Limit: l, Want: 5}}, out); err != nil || out[0].Granted != 5 {
				t.Fatalf("Allot = %v, %+v; want 5 granted", err, out[0])
			}
			got := commandCalls(t, srv.Addr())
			want := map[string]int64{"evalsha": 1, "mget": 1, "set": 1, "get": 0, "time": tc.time}
			for cmd, n := range want {
				if got[cmd] != n {
					t.Errorf("one Allot ran %s %d times, want %d (all: %v)", cmd, got[cmd], n, got)
				}
			}
		})
	}
}
