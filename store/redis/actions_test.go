package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/storetest"
)

// In a cluster, a batch across slots that mixes a take with an action is
// refused before anything is sent; the same batch in one slot, and a batch
// of actions and looks across slots, are decided.
func TestCrossSlotActions(t *testing.T) {
	t.Parallel() // its own Cluster (mostly waiting for it to form) and a fake clock
	cl := redistest.StartCluster(t)
	c := storetest.NewClock()
	s := newTestStore(t, cl.URL(), c)
	ctx := context.Background()
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 5, Window: time.Minute}
	if slotOf(redisKey(s.prefix, lim.Algorithm, "x:a")) == slotOf(redisKey(s.prefix, lim.Algorithm, "x:b")) {
		t.Fatal("x:a and x:b share a slot; pick other keys")
	}
	look := func(key string) int64 {
		t.Helper()
		res := make([]sluice.Result, 1)
		if err := s.Take(ctx, []sluice.Op{{Key: key, Limit: lim}}, res); err != nil {
			t.Fatal(err)
		}
		return res[0].Remaining
	}
	for _, tc := range []struct {
		name    string
		ops     []sluice.Op
		refused bool
		want    map[string]int64 // Remaining after
	}{
		{"take and charge across slots", []sluice.Op{
			{Key: "x:a", Limit: lim, Cost: 1},
			{Key: "x:b", Limit: lim, Cost: 2, Action: sluice.Charge},
		}, true, map[string]int64{"x:a": 5, "x:b": 5}},
		{"charge and look across slots", []sluice.Op{
			{Key: "x:a", Limit: lim, Cost: 0},
			{Key: "x:b", Limit: lim, Cost: 2, Action: sluice.Charge},
		}, false, map[string]int64{"x:a": 5, "x:b": 3}},
		{"take and charge in one slot", []sluice.Op{
			{Key: "{x}:a", Limit: lim, Cost: 1},
			{Key: "{x}:b", Limit: lim, Cost: 2, Action: sluice.Charge},
		}, false, map[string]int64{"{x}:a": 4, "{x}:b": 3}},
	} {
		res := make([]sluice.Result, len(tc.ops))
		err := s.Take(ctx, tc.ops, res)
		if got := errors.Is(err, ErrCrossSlotAction); got != tc.refused {
			t.Errorf("%s: Take = %v, want refused %v", tc.name, err, tc.refused)
		}
		if !tc.refused && err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for key, want := range tc.want {
			if got := look(key); got != want {
				t.Errorf("%s: %s Remaining %d, want %d", tc.name, key, got, want)
			}
		}
	}
}
