package redis

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/storetest"
)

// TestPairRecord: a reservation's record is a key of its own in the
// counter's hash slot, living the op's SettleWithin, and Keys lists the
// counter, never the record.
func TestPairRecord(t *testing.T) {
	srv := redistest.Start(t)
	s := newTestStore(t, srv.URL(), storetest.NewClock())
	l := sluice.Limit{Algorithm: sluice.GCRA, Quota: 10, Window: time.Minute}
	op := sluice.Op{Key: "acct", Limit: l, Cost: 4, Lease: 42, SettleWithin: 90 * time.Second}
	res := make([]sluice.Result, 1)
	if err := s.Take(context.Background(), []sluice.Op{op}, res); err != nil || !res[0].Allowed {
		t.Fatalf("reservation: %+v, %v", res[0], err)
	}
	rk := pairKey(s.prefix, l.Algorithm, "acct", 42)
	if got, want := slotOf(rk), slotOf(redisKey(s.prefix, l.Algorithm, "acct")); got != want {
		t.Errorf("record %q in slot %d, the counter in %d; want one slot", rk, got, want)
	}
	pttl, err := s.client.Do(context.Background(), s.client.B().Pttl().Key(rk).Build()).AsInt64()
	if err != nil || pttl <= 0 || pttl > 90_000 {
		t.Errorf("record %q: PTTL %d (%v), want at most 90000 ms (its SettleWithin), above 0", rk, pttl, err)
	}
	keys, _, err := s.Keys(context.Background(), "", 10)
	if err != nil || len(keys) != 1 || keys[0] != "acct" {
		t.Errorf("Keys = %q, %v; want [acct] (not the record)", keys, err)
	}
}

// TestCrossSlotPairRefunds: in a cluster, requests whose reservations
// live in different slots from a tight limit's are reserved per slot and
// taken back, records and all, when the tight slot denies; under
// contention from 3 stores, refunds race with other charges (and take
// back by subtracting). Afterwards every loose counter holds one unit per
// admitted request, an admitted request's settle finds its record, and a
// denied one's finds none.
func TestCrossSlotPairRefunds(t *testing.T) {
	t.Parallel() // its own Cluster; exact counts on a fake clock
	url := redistest.StartCluster(t).URL()
	now := storetest.NewClock().Now
	prefix := fmt.Sprintf("xp%d:", time.Now().UnixNano())
	var stores []*Store
	for range 3 {
		st, err := New(Options{URL: url, Prefix: prefix, Now: now, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		stores = append(stores, st)
	}
	tight := sluice.Op{Key: "xs:tight", Limit: sluice.Limit{Algorithm: sluice.SlidingLog, Quota: 40, Window: time.Hour}, Cost: 1}
	loose := []sluice.Op{
		{Key: "xs:tb", Limit: sluice.Limit{Algorithm: sluice.TokenBucket, Quota: 1000, Window: time.Hour}},
		{Key: "xs:gcra", Limit: sluice.Limit{Algorithm: sluice.GCRA, Quota: 1000, Window: time.Hour}},
		{Key: "xs:fw", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1000, Window: time.Hour}},
		{Key: "xs:sw", Limit: sluice.Limit{Algorithm: sluice.SlidingWindow, Quota: 1000, Window: time.Hour}},
	}
	for i := range loose {
		loose[i].Cost, loose[i].SettleWithin = 1, time.Hour
	}
	const goroutines, each = 16, 5
	var mu sync.Mutex
	admitted := map[uint64]bool{} // lease → admitted
	var wg sync.WaitGroup
	for si, st := range stores {
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ops := append([]sluice.Op{tight}, loose...)
				res := make([]sluice.Result, len(ops))
				for i := range each {
					lease := uint64(1 + (si*goroutines+g)*each + i)
					for j := 1; j < len(ops); j++ {
						ops[j].Lease = lease
					}
					if err := st.Take(context.Background(), ops, res); err != nil {
						t.Error(err)
						return
					}
					all := true
					for _, r := range res {
						all = all && r.Allowed
					}
					mu.Lock()
					admitted[lease] = all
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	n := int64(0)
	for _, a := range admitted {
		if a {
			n++
		}
	}
	if n != tight.Limit.Quota {
		t.Fatalf("admitted %d requests, want %d", n, tight.Limit.Quota)
	}
	remaining := func(op sluice.Op) int64 {
		op.Cost, op.Lease = 0, 0
		res := make([]sluice.Result, 1)
		if err := stores[0].Take(context.Background(), []sluice.Op{op}, res); err != nil {
			t.Fatal(err)
		}
		return res[0].Remaining
	}
	for _, op := range loose {
		if charged := op.Limit.Quota - remaining(op); charged != n {
			t.Errorf("%v: charged %d, want %d (one per admitted request; denied ones taken back)", op.Limit, charged, n)
		}
		// A settle of usage 3 for every request: an admitted one's record
		// holds 1 (charges 2 more); a denied one's is gone, so the call
		// reserves 3 anew, on its own.
		for lease, a := range admitted {
			o := op
			o.Cost, o.Lease = 3, lease
			res := make([]sluice.Result, 1)
			if err := stores[int(lease)%3].Take(context.Background(), []sluice.Op{o}, res); err != nil || !res[0].Allowed {
				t.Fatalf("%v: call of %d (admitted %v): %+v, %v", op.Limit, lease, a, res[0], err)
			}
		}
		want := 3*n + 3*(int64(len(admitted))-n)
		if charged := op.Limit.Quota - remaining(op); charged != want {
			t.Errorf("%v: after the settles, charged %d, want %d (3 per request)", op.Limit, charged, want)
		}
	}
}
