package redis

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/storetest"
)

// TestLogUpgrade checks that sliding_log and concurrency keys written in
// the earlier format (a sorted set of entries only: member At or "At:N",
// lease ID or "ID:N") are read right and converted on first use, lease
// releases included.
func TestLogUpgrade(t *testing.T) {
	srv := redistest.Start(t)
	c := storetest.NewClock()
	s := newTestStore(t, srv.URL(), c)
	now := c.Now().UnixMicro()
	us := func(d time.Duration) string { return strconv.FormatInt(now+d.Microseconds(), 10) }
	slog := sluice.Limit{Algorithm: sluice.SlidingLog, Quota: 10, Window: time.Second}
	conc := sluice.Limit{Algorithm: sluice.Concurrency, Quota: 10, Window: time.Second}
	lkey, ckey := redisKey(s.prefix, sluice.SlidingLog, "u"), redisKey(s.prefix, sluice.Concurrency, "u")
	for _, cmd := range [][]string{
		{"ZADD", lkey, us(-900 * time.Millisecond), us(-900 * time.Millisecond), us(-100 * time.Millisecond), us(-100*time.Millisecond) + ":4"},
		{"ZADD", ckey, us(500 * time.Millisecond), "11", us(700 * time.Millisecond), "12:3"},
	} {
		if _, err := srv.Do(cmd...); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	res := make([]sluice.Result, 1)
	for i, st := range []struct {
		op   sluice.Op
		want sluice.Result
	}{
		// 1 + 4 units held: 5 remain; the entry of 1 leaves in 100ms.
		{sluice.Op{Key: "u", Limit: slog, Cost: 5}, sluice.Result{Allowed: true, Limit: 10, Remaining: 0, ResetAfter: time.Second}},
		{sluice.Op{Key: "u", Limit: slog, Cost: 1}, sluice.Result{Reason: sluice.ReasonLimited, Limit: 10, ResetAfter: time.Second, RetryAfter: 100 * time.Millisecond}},
		// Leases of 1 and 3: 6 remain; releasing the lease of 3 frees 3.
		{sluice.Op{Key: "u", Limit: conc, Cost: 0}, sluice.Result{Allowed: true, Limit: 10, Remaining: 6, ResetAfter: 700 * time.Millisecond}},
		{sluice.Op{Key: "u", Limit: conc, Release: true, Lease: 12}, sluice.Result{Allowed: true, Limit: 10, Remaining: 9, ResetAfter: 500 * time.Millisecond}},
		{sluice.Op{Key: "u", Limit: conc, Release: true, Lease: 11}, sluice.Result{Allowed: true, Limit: 10, Remaining: 10}},
	} {
		if err := s.Take(ctx, []sluice.Op{st.op}, res); err != nil {
			t.Fatal(err)
		}
		st.want.At = now // decided at the test clock's reading
		if res[0] != st.want {
			t.Errorf("step %d: Take(%+v) = %+v, want %+v", i+1, st.op, res[0], st.want)
		}
	}
	if n, err := srv.Do("EXISTS", ckey); err != nil || n != int64(0) {
		t.Errorf("EXISTS of the emptied concurrency key = %v, %v; want 0", n, err)
	}
}

// TestLogMassExpiry replays, against the memory store and Redis, keys whose
// entries of one unit expire by the thousand at once, with the clock then
// stepping back into the expired span and releases of expired leases: the
// Results must agree, and no call may remove more than a bounded number of
// the expired entries (the rest wait behind the key's mark).
func TestLogMassExpiry(t *testing.T) {
	t.Parallel() // its own server and fake clock: CPU, beside the tests that wait
	srv := redistest.Start(t)
	c := storetest.NewClock()
	st := newTestStore(t, srv.URL(), c)
	mem := memory.New(memory.Options{Now: c.Now})
	defer mem.Close()
	ctx := context.Background()
	for _, a := range []sluice.Algorithm{sluice.SlidingLog, sluice.Concurrency} {
		l := sluice.Limit{Algorithm: a, Quota: 1000, Window: 100 * time.Millisecond}
		key := "mass:" + a.String()
		rkey := redisKey(st.prefix, a, key)
		var leases [][2]uint64 // memory's and Redis's lease of one acquire
		step := 0
		take := func(op sluice.Op) sluice.Result {
			t.Helper()
			step++
			mOp, rOp := op, op
			if op.Release {
				mOp.Lease, rOp.Lease = leases[op.Lease][0], leases[op.Lease][1]
			}
			want, got := make([]sluice.Result, 1), make([]sluice.Result, 1)
			if err := mem.Take(ctx, []sluice.Op{mOp}, want); err != nil {
				t.Fatal(err)
			}
			if err := st.Take(ctx, []sluice.Op{rOp}, got); err != nil {
				t.Fatal(err)
			}
			if (want[0].Lease != 0) != (got[0].Lease != 0) {
				t.Fatalf("%v step %d: lease %d, memory lease %d", a, step, got[0].Lease, want[0].Lease)
			}
			if want[0].Lease != 0 {
				leases = append(leases, [2]uint64{want[0].Lease, got[0].Lease})
			}
			w, g := want[0], got[0]
			w.Lease, g.Lease = 0, 0
			if w != g {
				t.Fatalf("%v step %d (now %d, %+v): got %+v, want %+v (memory store)", a, step, c.Now().UnixMicro(), op, g, w)
			}
			return got[0]
		}
		entries := func() int64 {
			n, err := srv.Do("ZCOUNT", rkey, "0", "+inf")
			if err != nil {
				t.Fatal(err)
			}
			return n.(int64)
		}
		hit := sluice.Op{Key: key, Limit: l, Cost: 1}
		look := sluice.Op{Key: key, Limit: l}
		for round := range 3 {
			// Fill: 1,000 hits of one unit, 20µs apart.
			for range 1000 {
				c.Advance(20 * time.Microsecond)
				take(hit)
			}
			if r := take(hit); r.Allowed {
				t.Fatalf("%v round %d: hit 1,001 allowed", a, round)
			}
			// 800 of them expire; the first call removes a bounded part.
			c.Advance(96 * time.Millisecond)
			before := entries()
			take(look)
			if left := entries(); left != before-256 {
				t.Errorf("%v round %d: one call removed %d of 800 expired entries, want 256", a, round, before-left)
			}
			if a == sluice.Concurrency {
				take(sluice.Op{Key: key, Limit: l, Release: true, Lease: uint64(len(leases) - 900)}) // an expired lease
				take(sluice.Op{Key: key, Limit: l, Release: true, Lease: uint64(len(leases) - 5)})   // a live one
			}
			// Back into the expired span: expired entries stay expired.
			c.Advance(-40 * time.Millisecond)
			take(look)
			take(hit)
			c.Advance(45 * time.Millisecond)
			for range 300 {
				c.Advance(time.Microsecond)
				take(hit)
			}
			// Everything expires: the key goes (unlinked, freed off the
			// main thread).
			c.Advance(200 * time.Millisecond)
			take(look)
			if n, err := srv.Do("EXISTS", rkey); err != nil || n != int64(0) {
				t.Errorf("%v round %d: EXISTS of a key whose entries all expired = %v, %v; want 0", a, round, n, err)
			}
			take(look)
		}
	}
}
