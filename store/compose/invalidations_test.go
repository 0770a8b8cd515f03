package compose

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/stack"
)

// A store that could not reach Redis at start passes on the real store's
// announcements once it connects: first "drop everything", then the keys
// of resets.
func TestConnectingStoreInvalidations(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill()
	c, err := connectRedis(redis.Options{URL: srv.URL(), Timeout: time.Second}, true, DefaultMemoryWatch, slog.New(slog.DiscardHandler), redis.New)
	if err != nil {
		t.Fatalf("connectRedis with Redis down, in the background: %v", err)
	}
	defer c.Close()
	var g sluice.Store = c
	inv, ok := g.(stack.Invalidator)
	if !ok {
		t.Fatalf("%T is not a stack.Invalidator", g)
	}
	var mu sync.Mutex
	alls, heard := 0, map[string]bool{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- inv.Invalidations(ctx, func(keys []string, all bool) {
			mu.Lock()
			defer mu.Unlock()
			if all {
				alls++
			}
			for _, k := range keys {
				heard[k] = true
			}
		})
	}()
	srv.Restart()
	poll := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			mu.Lock()
			ok := cond()
			mu.Unlock()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("gave up waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	poll("drop everything once connected", func() bool { return alls >= 1 })
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1, Window: time.Hour}
	if err := g.Take(context.Background(), []sluice.Op{{Key: "{c}k", Limit: lim, Action: sluice.Reset}}, make([]sluice.Result, 1)); err != nil {
		t.Fatalf("reset: %v", err)
	}
	poll("the reset heard", func() bool { return heard["{c}k"] })
	cancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("Invalidations after cancel = %v, want %v", err, context.Canceled)
	}
}
