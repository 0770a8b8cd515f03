package redis

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
)

// TestFaults kills, pauses and restarts the server under a live store: while
// Redis is gone every Take fails within the timeout (never hangs), and once
// it is back Takes succeed again without a new store.
func TestFaults(t *testing.T) {
	srv := redistest.Start(t)
	const timeout = 50 * time.Millisecond
	st, err := New(Options{URL: srv.URL(), Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	limit := sluice.PerSecond(sluice.TokenBucket, 1000)
	take := func() (time.Duration, error) {
		ops := []sluice.Op{{Key: "fault", Limit: limit, Cost: 1}}
		res := make([]sluice.Result, 1)
		start := time.Now()
		err := st.Take(context.Background(), ops, res)
		if err == nil && !res[0].Allowed {
			t.Fatalf("Take = %+v, want allowed", res[0])
		}
		return time.Since(start), err
	}
	// slack covers scheduling on a loaded 2-core machine under -race.
	const slack = 100 * time.Millisecond
	mustFailFast := func(what string) {
		t.Helper()
		for range 5 {
			d, err := take()
			if err == nil {
				t.Fatalf("%s: Take succeeded, want an error", what)
			}
			if d > timeout+slack {
				t.Fatalf("%s: Take took %v to fail (%v), want ≤ %v", what, d, err, timeout+slack)
			}
		}
	}
	mustRecover := func(what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err := take()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: Take still fails 10s after Redis is back: %v", what, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if _, err := take(); err != nil {
		t.Fatalf("Take on a healthy server: %v", err)
	}

	srv.Pause()
	mustFailFast("paused (SIGSTOP)")
	srv.Resume()
	mustRecover("resumed")

	// Paused longer than the connection's write timeout: the client drops
	// the connection and redials once Redis answers again.
	srv.Pause()
	mustFailFast("paused again")
	time.Sleep(1500 * time.Millisecond)
	mustFailFast("paused for 1.5s")
	srv.Resume()
	mustRecover("resumed after a long pause")

	srv.Kill()
	mustFailFast("killed")
	srv.Restart() // a fresh, empty server on the same port: scripts reload via NOSCRIPT fallback
	mustRecover("restarted")

	// A context shorter than the store timeout wins.
	srv.Pause()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	start := time.Now()
	err = st.Take(ctx, []sluice.Op{{Key: "fault", Limit: limit, Cost: 1}}, make([]sluice.Result, 1))
	cancel()
	if d := time.Since(start); err == nil || d > 10*time.Millisecond+slack {
		t.Fatalf("Take with a 10ms context on a paused server = %v after %v, want an error within ~10ms", err, d)
	}
	srv.Resume()
	mustRecover("resumed again")
}
