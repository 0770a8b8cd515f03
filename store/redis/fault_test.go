package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
)

// TestFaults kills, pauses and restarts the server under a live store: while
// Redis is gone every Take fails by the store's own means (its timeout, a
// refused connection or the open breaker; the caller's context never ends),
// never hangs, and once it is back Takes succeed again without a new store.
// A caller's context that ends first wins over the store timeout.
func TestFaults(t *testing.T) {
	t.Parallel() // its own server(s); it mostly waits out timeouts and pauses
	srv := redistest.Start(t)
	// Long enough that a healthy call on a loaded machine answers in time
	// (50ms did not, under -race beside other work).
	const timeout = time.Second
	st, err := New(Options{URL: srv.URL(), Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	limit := sluice.Limit{Algorithm: sluice.TokenBucket, Quota: 1000, Window: time.Second}
	take := func(st *Store, ctx context.Context) error {
		ops := []sluice.Op{{Key: "fault", Limit: limit, Cost: 1}}
		res := make([]sluice.Result, 1)
		err := returns(t, func() error { return st.Take(ctx, ops, res) })
		if err == nil && !res[0].Allowed {
			t.Fatalf("Take = %+v, want allowed", res[0])
		}
		return err
	}
	// mustFail: five Takes fail and return (context.Background never ends:
	// the store ended them by itself). A paused server answers nothing, so
	// only the store timeout or the open breaker can end them.
	mustFail := func(what string, paused bool) {
		t.Helper()
		for range 5 {
			err := take(st, context.Background())
			if err == nil {
				t.Fatalf("%s: Take succeeded, want an error", what)
			}
			if paused && !errors.Is(err, sluice.ErrStoreTimeout) && !errors.Is(err, sluice.ErrStoreUnavailable) {
				t.Fatalf("%s: Take = %v, want ErrStoreTimeout or ErrStoreUnavailable", what, err)
			}
		}
	}
	mustRecover := func(what string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			err := take(st, context.Background())
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: Take still fails 60s after Redis is back: %v", what, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	mustRecover("healthy") // the first call loads the script

	srv.Pause()
	mustFail("paused (SIGSTOP)", true)
	srv.Resume()
	mustRecover("resumed")

	// Paused longer than the connection's write timeout: the client drops
	// the connection and redials once Redis answers again.
	srv.Pause()
	mustFail("paused again", true)
	time.Sleep(1500 * time.Millisecond)
	mustFail("paused for 1.5s", true)
	srv.Resume()
	mustRecover("resumed after a long pause")

	srv.Kill()
	mustFail("killed", false)
	srv.Restart() // a fresh, empty server on the same port: scripts reload via NOSCRIPT fallback
	mustRecover("restarted")

	// A context shorter than the store timeout wins: with a store whose
	// timeout is an hour, only the caller's cancel can end the Take.
	long, err := New(Options{URL: srv.URL(), Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer long.Close()
	if err := take(long, context.Background()); err != nil {
		t.Fatalf("Take on a healthy server (no timeout to miss): %v", err)
	}
	srv.Pause()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(10*time.Millisecond, cancel)
	err = take(long, ctx)
	if !errors.Is(err, context.Canceled) || errors.Is(err, sluice.ErrStoreTimeout) {
		t.Fatalf("Take with a canceled context on a paused server = %v, want the caller's context.Canceled", err)
	}
	srv.Resume()
	mustRecover("resumed again")
}

// returns runs f and returns its error, failing the test if f has not
// returned after a minute: a call that hangs is a failure, one that is
// merely slow on a loaded machine is not.
func returns(t *testing.T, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("the call has not returned after a minute: it hangs")
		return nil
	}
}
