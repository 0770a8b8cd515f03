package redis

import (
	"context"
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
