package compose

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/storetest"
)

// TestNativeHybridWindow: with native fixed windows (INCRBY on per-window
// keys), a fixed_window key placed hybrid is decided by the global store:
// the allot script keeps its count in the script's own key, which the
// native Takes never see, so leases there granted the quota a second time
// (the fault matrix found 35 admitted of 20 in one window). Hit for hit,
// the stack admits exactly the quota.
func TestNativeHybridWindow(t *testing.T) {
	srv := sharedRedis(t)
	clock := storetest.NewClock()
	c := stackConfig(srv.URL(), clock, DeniedOff)
	c.Redis.NativeFixedWindow = true
	s := newStack(t, c)
	ctx := context.Background()
	const quota = 20
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: quota, Window: time.Hour}
	admitted := 0
	for i := range 3 * quota {
		res := make([]sluice.Result, 1)
		if err := s.Take(ctx, []sluice.Op{{Key: "h{native}u", Limit: lim, Cost: 1}}, res); err != nil {
			t.Fatalf("hit %d: %v", i, err)
		}
		if res[0].Allowed {
			admitted++
		}
		clock.Advance(time.Millisecond)
	}
	if admitted != quota {
		t.Errorf("admitted %d of %d hits, want exactly the quota %d", admitted, 3*quota, quota)
	}
	if g := s.Stats().Hybrid.Granted; g != 0 {
		t.Errorf("the hybrid store was granted %d units, want 0 (the key is decided globally)", g)
	}
}
