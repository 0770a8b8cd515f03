package redis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
)

// TestBreakerPolicy feeds call outcomes to one node's breaker: it opens on
// evidence the node is down or erroring, never on one slow call.
func TestBreakerPolicy(t *testing.T) {
	const (
		ok   = callOK
		conn = callConn
		slow = callTimeout
		rerr = callError
		gone = callIgnored
	)
	rep := func(o callOutcome, n int) []callOutcome {
		out := make([]callOutcome, n)
		for i := range out {
			out[i] = o
		}
		return out
	}
	cat := func(parts ...[]callOutcome) []callOutcome {
		var out []callOutcome
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	// alt repeats pattern n times.
	alt := func(n int, pattern ...callOutcome) []callOutcome {
		var out []callOutcome
		for range n {
			out = append(out, pattern...)
		}
		return out
	}
	for _, tt := range []struct {
		name     string
		calls    []callOutcome
		wantOpen bool
	}{
		{"one slow call", rep(slow, 1), false},
		{"one slow call among many good ones", cat(rep(ok, 50), rep(slow, 1), rep(ok, 50)), false},
		{"slow calls under load, below the ratio", alt(20, ok, slow, ok), false},
		{"four refused connections", rep(conn, 4), false},
		{"five refused connections", rep(conn, 5), true},
		{"refused connections broken by a success", cat(rep(conn, 4), rep(ok, 20), rep(conn, 4)), false},
		{"timeouts between refused connections do not reset their count", cat(rep(ok, 20), rep(conn, 4), rep(slow, 2), rep(conn, 1)), true},
		{"two timeouts in a row", rep(slow, 2), false},
		{"three timeouts in a row: a hung node", rep(slow, 3), true},
		{"three timeouts in a row after much success", cat(rep(ok, 1000), rep(slow, 3)), true},
		{"timeouts broken by successes", cat(rep(ok, 20), rep(slow, 2), rep(ok, 1), rep(slow, 2), rep(ok, 1), rep(slow, 2)), false},
		{"half of the calls time out, never in a row", alt(10, slow, ok), true},
		{"a third of the calls time out", alt(10, slow, ok, ok), false},
		{"Redis error replies count in the ratio", cat(rep(ok, 6), rep(rerr, 6)), true},
		{"a closed store says nothing", rep(gone, 50), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode("127.0.0.1:1", BreakerOptions{}.withDefaults())
			for _, o := range tt.calls {
				report, err := n.allow()
				if err != nil {
					break // open: the check below says whether it should be
				}
				report(o, fmt.Errorf("outcome %d", o))
			}
			if got := n.open(); got != tt.wantOpen {
				t.Errorf("after %d calls: open = %v, want %v (counts %+v)", len(tt.calls), got, tt.wantOpen, n.cb.Counts())
			}
		})
	}
}

// TestBreakerHalfOpen: an open breaker refuses calls with
// sluice.ErrStoreUnavailable, lets one probe through after OpenTimeout, and
// closes when it succeeds (or opens again when it fails).
func TestBreakerHalfOpen(t *testing.T) {
	const openFor = 30 * time.Millisecond
	n := newNode("127.0.0.1:1", BreakerOptions{OpenTimeout: openFor}.withDefaults())
	trip := func() {
		t.Helper()
		for range 5 {
			report, err := n.allow()
			if err != nil {
				t.Fatal(err)
			}
			report(callConn, errors.New("connection refused"))
		}
		if !n.open() {
			t.Fatal("not open after 5 refused connections")
		}
	}
	trip()
	if _, err := n.allow(); !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Fatalf("allow while open = %v, want ErrStoreUnavailable", err)
	}
	if h := n.health(); h.State != "open" || h.LastError != "connection refused" {
		t.Errorf("health = %+v, want open with the last error", h)
	}
	time.Sleep(openFor + 20*time.Millisecond)
	probe, err := n.allow()
	if err != nil {
		t.Fatalf("after OpenTimeout: allow = %v, want a probe", err)
	}
	if _, err := n.allow(); !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Errorf("second call while the probe is out = %v, want ErrStoreUnavailable", err)
	}
	probe(callTimeout, errors.New("slow"))
	if !n.open() {
		t.Fatal("a failed probe left the breaker not open")
	}
	time.Sleep(openFor + 20*time.Millisecond)
	probe, err = n.allow()
	if err != nil {
		t.Fatalf("allow = %v, want a probe", err)
	}
	probe(callOK, nil)
	if h := n.health(); h.State != "closed" || h.LastError != "" {
		t.Errorf("after a good probe: health = %+v, want closed", h)
	}
	if got := n.opened.Load(); got != 2 {
		t.Errorf("opened %d times, want 2", got)
	}
}

// busyScript blocks Redis for ARGV[1] µs of its own clock.
const busyScript = `local t = redis.call('TIME')
local t0 = t[1] * 1000000 + t[2]
while true do
  t = redis.call('TIME')
  if t[1] * 1000000 + t[2] - t0 >= tonumber(ARGV[1]) then return 1 end
end`

// busy blocks srv for d on a connection of its own, in the background.
func busy(srv *redistest.Server, d time.Duration) <-chan error {
	ch := make(chan error, 1)
	go func() {
		_, err := srv.Do("EVAL", busyScript, "0", fmt.Sprint(d.Microseconds()))
		ch <- err
	}()
	return ch
}

// TestTimeoutFromWrite: a Take queued behind a slow call waits longer than
// the store timeout in all, but its own call answers within the timeout, so
// it succeeds and no failure is counted.
func TestTimeoutFromWrite(t *testing.T) {
	t.Parallel() // its own server; it mostly waits for busy scripts
	srv := redistest.Start(t)
	// Each busy script holds Redis 0.6 × timeout: 0.8s of margin for a
	// loaded machine before a call would really time out.
	const timeout = 2 * time.Second
	st, err := New(Options{URL: srv.URL(), Timeout: timeout, MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var calls atomic.Int32
	var blocked <-chan error
	st.callHook = func(d time.Duration, o callOutcome) {
		if calls.Add(1) == 1 {
			// The first call is back: keep Redis busy while the next one,
			// queued meanwhile, is sent.
			blocked = busy(srv, timeout*6/10)
			time.Sleep(50 * time.Millisecond)
		}
	}
	limit := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1000, Window: time.Second}
	take := func(key string) (time.Duration, error) {
		start := time.Now()
		err := st.Take(context.Background(), []sluice.Op{{Key: key, Limit: limit, Cost: 1}}, make([]sluice.Result, 1))
		return time.Since(start), err
	}
	first := busy(srv, timeout*6/10)
	time.Sleep(50 * time.Millisecond)
	var wg sync.WaitGroup
	var errA error
	wg.Go(func() { _, errA = take("a") }) // sent: waits for the first busy script
	time.Sleep(50 * time.Millisecond)
	took, errB := take("b") // queued behind a, then waits for the second busy script
	wg.Wait()
	if err := errors.Join(<-first, <-blocked); err != nil {
		t.Fatalf("busy script: %v", err)
	}
	if errA != nil || errB != nil {
		t.Fatalf("Takes = %v, %v; want both to succeed (each call answered within %v)", errA, errB, timeout)
	}
	if took <= timeout {
		t.Logf("b took %v, not more than the timeout %v: the test did not queue it long enough", took, timeout)
	} else {
		t.Logf("b took %v in all (queued, then its own call), more than the %v timeout", took, timeout)
	}
	if c := st.nodes.single.cb.Counts(); c.TotalFailures != 0 {
		t.Errorf("breaker counts %+v, want no failure", c)
	}
}

// TestCancelWhileQueued: a caller that gives up while its Take is queued
// gets its context's error at once, before the call ahead of it has been
// answered (Redis is stopped until the test resumes it), its Take is never
// sent (nothing charged), and the breaker counts nothing.
func TestCancelWhileQueued(t *testing.T) {
	srv := redistest.Start(t)
	st, err := New(Options{URL: srv.URL(), Timeout: time.Hour, MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	limit := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1000, Window: time.Second}
	if err := st.Take(context.Background(), []sluice.Op{{Key: "warm", Limit: limit, Cost: 1}}, make([]sluice.Result, 1)); err != nil {
		t.Fatal(err)
	}
	// The warm call's batcher goroutine counts itself out after its Take
	// returns: wait for that, so that in flight below can only be a.
	waitBatcher(t, &st.one, func(inflight, queued int) bool { return inflight == 0 && queued == 0 })
	srv.Pause()
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	doneA := make(chan error, 1)
	go func() {
		doneA <- st.Take(context.Background(), []sluice.Op{{Key: "a", Limit: limit, Cost: 1}}, make([]sluice.Result, 1))
	}()
	// a is in flight (its call taken from the queue) before b is queued.
	waitBatcher(t, &st.one, func(inflight, queued int) bool { return inflight == 1 && queued == 0 })
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		waitBatcher(t, &st.one, func(_, queued int) bool { return queued == 1 })
		cancel()
	}()
	errB := st.Take(ctx, []sluice.Op{{Key: "b", Limit: limit, Cost: 1}}, make([]sluice.Result, 1))
	if !errors.Is(errB, context.Canceled) {
		t.Errorf("canceled Take = %v, want context.Canceled", errB)
	}
	if errors.Is(errB, sluice.ErrStoreTimeout) || errors.Is(errB, sluice.ErrStoreUnavailable) {
		t.Errorf("canceled Take = %v, want no store error", errB)
	}
	select {
	case err := <-doneA:
		t.Errorf("the Take ahead returned (%v) before Redis was resumed, want it still waiting", err)
	default: // b returned while a still waits: b did not wait for the queue
	}
	srv.Resume()
	resumed = true
	if err := <-doneA; err != nil {
		t.Fatalf("Take sent before the cancel = %v, want success", err)
	}
	res := make([]sluice.Result, 1)
	if err := st.Take(context.Background(), []sluice.Op{{Key: "b", Limit: limit}}, res); err != nil {
		t.Fatal(err)
	}
	if res[0].Remaining != 1000 {
		t.Errorf("key of the canceled Take: remaining %d, want 1000 (never charged)", res[0].Remaining)
	}
	if c := st.nodes.single.cb.Counts(); c.TotalFailures != 0 {
		t.Errorf("breaker counts %+v, want no failure", c)
	}
}

// waitBatcher polls b until cond holds for its calls in flight and groups
// queued, failing the test after a minute.
func waitBatcher(t *testing.T, b *batcher, cond func(inflight, queued int) bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		b.mu.Lock()
		ok := cond(b.inflight, len(b.queue))
		b.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Error("batcher state not reached within a minute")
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// TestOneCallOneFailure: many Takes carried by one timed-out call count as
// one failure, not one per Take.
func TestOneCallOneFailure(t *testing.T) {
	srv := redistest.Start(t)
	const timeout = 200 * time.Millisecond
	st, err := New(Options{URL: srv.URL(), Timeout: timeout, Breaker: BreakerOptions{MinCalls: 1000, ConsecutiveTimeouts: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var calls atomic.Int32
	st.callHook = func(time.Duration, callOutcome) { calls.Add(1) }
	limit := sluice.Limit{Algorithm: sluice.GCRA, Quota: 1000, Window: time.Second}
	if err := st.Take(context.Background(), []sluice.Op{{Key: "warm", Limit: limit, Cost: 1}}, make([]sluice.Result, 1)); err != nil {
		t.Fatal(err)
	}
	calls.Store(0)
	srv.Pause()
	var wg sync.WaitGroup
	var timeouts atomic.Int32
	for i := range 50 {
		wg.Go(func() {
			err := st.Take(context.Background(), []sluice.Op{{Key: fmt.Sprint("k", i), Limit: limit, Cost: 1}}, make([]sluice.Result, 1))
			if errors.Is(err, sluice.ErrStoreTimeout) {
				timeouts.Add(1)
			} else {
				t.Errorf("Take on a paused server = %v, want ErrStoreTimeout", err)
			}
		})
	}
	wg.Wait()
	srv.Resume()
	c := st.nodes.single.cb.Counts()
	if int(c.TotalFailures) != int(calls.Load()) || c.TotalFailures >= 50 {
		t.Errorf("50 Takes in %d calls: breaker counts %d failures, want one per call", calls.Load(), c.TotalFailures)
	}
	if timeouts.Load() != 50 {
		t.Errorf("%d of 50 Takes timed out", timeouts.Load())
	}
}

// TestBreakerOnRealRedis: killed, the node's breaker opens after the
// refused connections and Takes fail at once with ErrStoreUnavailable;
// restarted, it closes after OpenTimeout. Paused, it opens after MinCalls
// timeouts. Health says so each time.
func TestBreakerOnRealRedis(t *testing.T) {
	srv := redistest.Start(t)
	const openFor = 300 * time.Millisecond
	st, err := New(Options{URL: srv.URL(), Timeout: 300 * time.Millisecond, Breaker: BreakerOptions{OpenTimeout: openFor}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var calls atomic.Int64 // script calls sent, answered or not
	st.callHook = func(time.Duration, callOutcome) { calls.Add(1) }
	limit := sluice.Limit{Algorithm: sluice.TokenBucket, Quota: 1000, Window: time.Second}
	take := func() error {
		return st.Take(context.Background(), []sluice.Op{{Key: "k", Limit: limit, Cost: 1}}, make([]sluice.Result, 1))
	}
	state := func() string { return st.Health()[0].State }
	var err0 error
	for range 3 { // the first call loads the script; a loaded machine may be slow
		if err0 = take(); err0 == nil {
			break
		}
	}
	if err := err0; err != nil || state() != "closed" {
		t.Fatalf("healthy: Take = %v, breaker %s", err, state())
	}
	if got := st.Health()[0].Node; got != srv.Addr() {
		t.Errorf("Health node = %q, want %q", got, srv.Addr())
	}
	waitOpen := func(what string) {
		t.Helper()
		for i := range 50 {
			err := take()
			if errors.Is(err, sluice.ErrStoreUnavailable) {
				sent := calls.Load()
				err = take()
				if !errors.Is(err, sluice.ErrStoreUnavailable) {
					t.Errorf("%s, open: Take = %v, want ErrStoreUnavailable", what, err)
				}
				// At once: refused by the breaker, no call sent to wait on.
				if got := calls.Load(); got != sent {
					t.Errorf("%s, open: %d script calls sent, want none", what, got-sent)
				}
				t.Logf("%s: open after %d failed Takes", what, i)
				return
			}
			if err == nil {
				t.Fatalf("%s: Take succeeded", what)
			}
		}
		t.Fatalf("%s: breaker still %s after 50 failed Takes", what, state())
	}
	waitClosed := func(what string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for take() != nil {
			if time.Now().After(deadline) {
				t.Fatalf("%s: Takes still fail after 60s (breaker %s)", what, state())
			}
			time.Sleep(20 * time.Millisecond)
		}
		if s := state(); s != "closed" {
			t.Errorf("%s: Take succeeded with the breaker %s, want closed", what, s)
		}
	}

	srv.Kill()
	waitOpen("killed")
	if h := st.Health()[0]; h.State != "open" || h.LastError == "" {
		t.Errorf("killed: Health = %+v, want open with an error", h)
	}
	srv.Restart()
	waitClosed("restarted")

	srv.Pause()
	waitOpen("paused")
	srv.Resume()
	waitClosed("resumed")
}

// TestLateCallNotRun: a call that reaches the head of Redis's queue only
// after the store gave up on it (Redis stopped until the Takes have failed)
// does nothing (scripts/guard.lua), so the Take that failed charged
// nothing.
func TestLateCallNotRun(t *testing.T) {
	srv := redistest.Start(t)
	const timeout = 300 * time.Millisecond
	st, err := New(Options{URL: srv.URL(), Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	limit := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 100, Window: time.Hour}
	for range 5 { // calls that teach the store the node's clock
		if err := st.Take(context.Background(), []sluice.Op{{Key: "warm", Limit: limit, Cost: 1}}, make([]sluice.Result, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := st.nodes.single.clock.deadline(time.Now(), timeout); !ok {
		t.Fatal("no clock estimate after 5 calls")
	}
	srv.Pause() // resumed only once both Takes have failed: their calls run late
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	var wg sync.WaitGroup
	for i := range 2 { // two, so that the client pipelines and keeps the connection
		wg.Go(func() {
			err := st.Take(context.Background(), []sluice.Op{{Key: fmt.Sprint("late", i), Limit: limit, Cost: 1}}, make([]sluice.Result, 1))
			if !errors.Is(err, sluice.ErrStoreTimeout) {
				t.Errorf("Take while Redis is busy = %v, want ErrStoreTimeout", err)
			}
		})
	}
	wg.Wait()
	srv.Resume()
	resumed = true
	time.Sleep(100 * time.Millisecond) // Redis works through what waited
	for i := range 2 {
		key := redisKey(DefaultPrefix, limit.Algorithm, fmt.Sprint("late", i))
		if n, err := srv.Do("EXISTS", key); err != nil || n != int64(0) {
			t.Errorf("EXISTS %s = %v, %v; want 0 (the late call charged nothing)", key, n, err)
		}
	}
}
