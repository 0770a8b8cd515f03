package redis

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/stack"
)

// TestTTL runs traffic on every algorithm with the Redis clock, then checks
// that every key the store created has a TTL and that the database is empty
// once the longest state has gone back to fresh (polled for: expiry is
// Redis's own, in real time).
func TestTTL(t *testing.T) {
	t.Parallel() // its own server; it mostly waits for Redis's expiry
	srv := redistest.Start(t)
	st, err := New(Options{URL: srv.URL(), Prefix: "ttl:", Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// Long enough that the long-window keys outlive the run on a loaded
	// machine; fixed and sliding windows are aligned, so one of them may
	// still end at any moment.
	const window = 1500 * time.Millisecond
	ctx := context.Background()
	var ops []sluice.Op
	for _, a := range stack.Algorithms() {
		for i, w := range []time.Duration{window / 3, window} {
			ops = append(ops, sluice.Op{Key: a.String() + string(rune('a'+i)), Limit: sluice.Limit{Algorithm: a, Quota: 5, Window: w}, Cost: 1})
		}
	}
	res := make([]sluice.Result, len(ops))
	for range 3 {
		for i := range ops {
			if err := st.Take(ctx, ops[i:i+1], res[i:i+1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	keys, err := srv.Do("KEYS", "*")
	if err != nil {
		t.Fatal(err)
	}
	list, _ := keys.([]any)
	// One key per op key, less any whose window already ended: the short
	// ones, and the aligned fixed window among the long ones.
	if len(list) < len(ops)/2-1 || len(list) > len(ops) {
		t.Fatalf("KEYS * has %d keys, want about %d (one per op key): %v", len(list), len(ops), list)
	}
	for _, k := range list {
		ttl, err := srv.Do("PTTL", k.(string))
		if err != nil {
			t.Fatal(err)
		}
		// -2: the key expired since KEYS (a window ended): fine; 0: it is
		// about to. -1 would be a key without a TTL. sliding_window keeps
		// its state two windows.
		if ms, _ := ttl.(int64); ms == -1 || ms > 2*window.Milliseconds() {
			t.Errorf("PTTL %s = %v, want in [0, %d] (or -2: already expired)", k, ttl, 2*window.Milliseconds())
		}
	}
	// Every key is gone once its state is fresh again: after 2 windows of
	// silence. Polled, failing only after a minute.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		n, err := srv.Do("DBSIZE")
		if err != nil {
			t.Fatal(err)
		}
		if n == int64(0) {
			break
		}
		if time.Now().After(deadline) {
			left, _ := srv.Do("KEYS", "*")
			t.Fatalf("DBSIZE = %v %v a minute after the last Take, want 0 (every key expires)", n, left)
		}
	}
}
