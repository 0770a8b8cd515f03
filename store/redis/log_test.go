package redis

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
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
		if res[0] != st.want {
			t.Errorf("step %d: Take(%+v) = %+v, want %+v", i+1, st.op, res[0], st.want)
		}
	}
	if n, err := srv.Do("EXISTS", ckey); err != nil || n != int64(0) {
		t.Errorf("EXISTS of the emptied concurrency key = %v, %v; want 0", n, err)
	}
}
