package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/stack"
	"github.com/sluice-rl/sluice/store/storetest"
)

// Allot takes quota exactly as Take counts it: grants respect Keep and
// Split, Takes see granted units as spent, and a give-back counts only in
// its own window.
func TestAllot(t *testing.T) {
	srv := redistest.Start(t)
	clock := storetest.NewClock()
	s, err := New(Options{URL: srv.URL(), Now: clock.Now, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	fw := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 100, Window: time.Second}
	gc := sluice.Limit{Algorithm: sluice.GCRA, Quota: 10, Window: time.Second, Burst: 10}
	allot := func(r stack.AllotRequest) stack.Allotment {
		t.Helper()
		out := make([]stack.Allotment, 1)
		if err := s.Allot(ctx, []stack.AllotRequest{r}, out); err != nil {
			t.Fatalf("Allot(%+v): %v", r, err)
		}
		return out[0]
	}
	remaining := func(key string, l sluice.Limit) int64 {
		t.Helper()
		res := make([]sluice.Result, 1)
		if err := s.Take(ctx, []sluice.Op{{Key: key, Limit: l}}, res); err != nil {
			t.Fatal(err)
		}
		return res[0].Remaining
	}
	steps := []struct {
		name          string
		req           stack.AllotRequest
		granted, left int64
	}{
		{"fixed window: want fits", stack.AllotRequest{Key: "f", Limit: fw, Want: 30, Keep: 10, Split: 1}, 30, 70},
		{"split caps at 1/2 above keep", stack.AllotRequest{Key: "f", Limit: fw, Want: 100, Keep: 10, Split: 2}, 30, 40},
		{"give back 20 of this window", stack.AllotRequest{Key: "f", Limit: fw, Give: 20, Epoch: -1, Keep: 10}, 0, 40}, // wrong epoch: ignored
		{"nothing below keep", stack.AllotRequest{Key: "f", Limit: fw, Want: 50, Keep: 40, Split: 1}, 0, 40},
		{"gcra: burst 10, keep 2, split 2", stack.AllotRequest{Key: "g", Limit: gc, Want: 10, Keep: 2, Split: 2}, 4, 6},
	}
	var epoch int64
	for _, st := range steps {
		a := allot(st.req)
		if a.Granted != st.granted || a.Remaining != st.left {
			t.Errorf("%s: granted %d remaining %d, want %d %d", st.name, a.Granted, a.Remaining, st.granted, st.left)
		}
		if st.req.Key == "f" {
			epoch = a.Epoch
		}
	}
	if got := remaining("f", fw); got != 40 {
		t.Errorf("Take look after allotments: remaining %d, want 40", got)
	}
	if a := allot(stack.AllotRequest{Key: "f", Limit: fw, Give: 20, Epoch: epoch}); a.Remaining != 60 {
		t.Errorf("give back 20 in its window: remaining %d, want 60", a.Remaining)
	}
	clock.Advance(time.Second)
	if a := allot(stack.AllotRequest{Key: "f", Limit: fw, Give: 20, Epoch: epoch}); a.Remaining != 100 {
		t.Errorf("give back after the window ended: remaining %d, want 100 (a fresh window, nothing freed twice)", a.Remaining)
	}
	if err := s.Allot(ctx, []stack.AllotRequest{{Key: "l", Limit: sluice.Limit{Algorithm: sluice.SlidingLog, Quota: 5, Window: time.Second}, Want: 1}}, make([]stack.Allotment, 1)); err == nil {
		t.Error("Allot of a sliding_log limit: nil error, want refused")
	}
}

// TestAllotBreaker: Allot goes through the breaker of the node owning its
// key, with no Take in between. Killed, the node's breaker opens after the
// refused connections, and Allot then fails at once with
// ErrStoreUnavailable, sending nothing; Take sees the same breaker. Paused,
// Allot fails with ErrStoreTimeout after the store timeout, until the
// timeouts open the breaker; a caller that gives up first gets its
// context's error, and its call still counts. Restarted or resumed, Allot
// works again.
func TestAllotBreaker(t *testing.T) {
	t.Parallel() // its own server(s); it mostly waits out timeouts and pauses
	srv := redistest.Start(t)
	// The timeout leaves a caller that gives up (below) a second to do so
	// before the store's own timeout could end its call. The breaker stays
	// open long enough that a loaded machine cannot let it half-open
	// between the call that opened it and the next one (with 300ms, a
	// busy host once counted a fourth timeout: the probe of a half-open
	// breaker).
	const timeout, openFor = time.Second, 2 * time.Second
	st, err := New(Options{URL: srv.URL(), Timeout: timeout, Breaker: BreakerOptions{OpenTimeout: openFor}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	limit := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1_000_000, Window: time.Hour}
	allotCtx := func(ctx context.Context) (time.Duration, error) {
		start := time.Now()
		err := st.Allot(ctx, []stack.AllotRequest{{Key: "a", Limit: limit, Want: 1}}, make([]stack.Allotment, 1))
		return time.Since(start), err
	}
	allot := func() (time.Duration, error) { return allotCtx(context.Background()) }
	state := func() string { return st.Health()[0].State }
	var err0 error
	for range 3 { // the first call loads the script; a loaded machine may be slow
		if _, err0 = allot(); err0 == nil {
			break
		}
	}
	if err0 != nil || state() != "closed" {
		t.Fatalf("healthy: Allot = %v, breaker %s", err0, state())
	}
	// waitOpen calls Allot until the breaker refuses it, checking each
	// failure before with check, and returns how many there were.
	waitOpen := func(what string, check func(time.Duration, error)) int {
		t.Helper()
		for i := range 50 {
			d, err := allot()
			if errors.Is(err, sluice.ErrStoreUnavailable) {
				sent := st.Allots()
				if _, err := allot(); !errors.Is(err, sluice.ErrStoreUnavailable) {
					t.Errorf("%s, open: Allot = %v, want ErrStoreUnavailable", what, err)
				}
				if got := st.Allots(); got != sent {
					t.Errorf("%s, open: %d allotment requests sent, want none", what, got-sent)
				}
				err := st.Take(context.Background(), []sluice.Op{{Key: "a", Limit: limit, Cost: 1}}, make([]sluice.Result, 1))
				if !errors.Is(err, sluice.ErrStoreUnavailable) {
					t.Errorf("%s, open: Take = %v, want ErrStoreUnavailable (one breaker per node)", what, err)
				}
				return i
			}
			if err == nil {
				t.Fatalf("%s: Allot succeeded", what)
			}
			check(d, err)
		}
		t.Fatalf("%s: breaker still %s after 50 failed Allots", what, state())
		return 0
	}
	waitClosed := func(what string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			_, err := allot()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: Allot still fails after 60s (breaker %s): %v", what, state(), err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if s := state(); s != "closed" {
			t.Errorf("%s: Allot succeeded with the breaker %s, want closed", what, s)
		}
	}

	srv.Kill()
	n := waitOpen("killed", func(_ time.Duration, err error) {
		if errors.Is(err, sluice.ErrStoreTimeout) {
			t.Errorf("killed: Allot = %v, want a connection error", err)
		}
	})
	if n > DefaultBreakerConsecutiveFailures {
		t.Errorf("killed: open after %d failed Allots, want ≤ %d", n, DefaultBreakerConsecutiveFailures)
	}
	if h := st.Health()[0]; h.State != "open" || h.LastError == "" {
		t.Errorf("killed: Health = %+v, want open with an error", h)
	}
	srv.Restart()
	waitClosed("restarted")
	// A pooled connection the kill broke may answer its first call after
	// the restart with EOF: spend those now (what they answer was checked
	// above), so that the pause below meets live connections only.
	for range 20 {
		_, _ = allot()
	}
	waitClosed("restarted, connections used")

	srv.Pause()
	defer srv.Resume()
	n = waitOpen("paused", func(d time.Duration, err error) {
		if !errors.Is(err, sluice.ErrStoreTimeout) || d < timeout {
			t.Errorf("paused: Allot = %v after %v, want ErrStoreTimeout, not before the timeout %v", err, d, timeout)
		}
	})
	if n != DefaultBreakerConsecutiveTimeouts {
		t.Errorf("paused: open after %d timed-out Allots, want %d", n, DefaultBreakerConsecutiveTimeouts)
	}
	srv.Resume()
	waitClosed("resumed")

	// Callers that give up first get their context's error at once; the
	// calls already sent still time out and open the breaker (a request
	// that was still queued behind one in flight is dropped unsent, as a
	// Take's is, so it takes more callers than timeouts).
	srv.Pause()
	gaveUp := 0
	for state() != "open" && gaveUp < 10*DefaultBreakerConsecutiveTimeouts {
		ctx, cancel := context.WithTimeout(context.Background(), timeout/4)
		_, err := allotCtx(ctx)
		cancel()
		if errors.Is(err, sluice.ErrStoreUnavailable) {
			break // opened meanwhile
		}
		gaveUp++
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, sluice.ErrStoreTimeout) {
			t.Errorf("paused, caller's deadline %v: Allot = %v, want the caller's context.DeadlineExceeded (the store's timeout is longer)", timeout/4, err)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for state() != "open" && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if s := state(); s != "open" {
		t.Errorf("paused: breaker %s after %d Allots whose callers gave up, want open (their calls timed out)", s, gaveUp)
	}
	srv.Resume()
	waitClosed("resumed again")
}

// commandCalls returns the calls of every command in INFO commandstats
// ("evalsha", "script|load", ...), counted since the last CONFIG RESETSTAT.
func commandCalls(t *testing.T, addr string) map[string]int64 {
	t.Helper()
	r, err := redistest.Do(addr, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int64{}
	for _, line := range strings.Split(r.(string), "\r\n") {
		name, rest, ok := strings.Cut(line, ":calls=")
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("INFO commandstats: %q: %v", line, err)
		}
		calls[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return calls
}

// TestAllotScriptOnce: Allot sends its script by SHA (EVALSHA) and never
// loads it per call: after the first call, 20 Allots run no SCRIPT LOAD and
// no EVAL. When the node forgets its scripts (SCRIPT FLUSH), the next Allot
// gets NOSCRIPT, sends the script once more (EVAL) and is granted; the one
// after is an EVALSHA again.
func TestAllotScriptOnce(t *testing.T) {
	srv := redistest.Start(t)
	s, err := New(Options{URL: srv.URL(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	l := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1_000_000, Window: time.Hour}
	allot := func(what string) {
		t.Helper()
		out := make([]stack.Allotment, 1)
		if err := s.Allot(ctx, []stack.AllotRequest{{Key: "once", Limit: l, Want: 5}}, out); err != nil || out[0].Granted != 5 {
			t.Fatalf("%s: Allot = %v, %+v; want 5 granted", what, err, out[0])
		}
	}
	allot("first")
	if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		allot("loaded")
	}
	c := commandCalls(t, srv.Addr())
	if c["evalsha"] != 20 || c["eval"] != 0 || c["script|load"] != 0 {
		t.Errorf("20 Allots ran evalsha %d, eval %d, script load %d; want 20, 0, 0", c["evalsha"], c["eval"], c["script|load"])
	}
	if _, err := srv.Do("SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
		t.Fatal(err)
	}
	allot("after SCRIPT FLUSH")
	allot("reloaded")
	c = commandCalls(t, srv.Addr())
	if c["eval"] != 1 || c["evalsha"] < 2 {
		t.Errorf("after SCRIPT FLUSH, 2 Allots ran eval %d, evalsha %d; want 1 eval (the reload) and 2 evalsha (one refused NOSCRIPT)", c["eval"], c["evalsha"])
	}
	res := make([]sluice.Result, 1)
	if err := s.Take(ctx, []sluice.Op{{Key: "once", Limit: l}}, res); err != nil || res[0].Remaining != l.Quota-5*23 {
		t.Errorf("look after 23 allotments of 5: %v, remaining %d; want %d", err, res[0].Remaining, l.Quota-5*23)
	}
}

// TestAllotManyOneCall: one Allot of many requests for one batch target
// (RLQS leases a report's buckets this way) is one script call, however
// many requests it carries up to MaxBatch, and each request is granted as
// if alone.
func TestAllotManyOneCall(t *testing.T) {
	srv := redistest.Start(t)
	s, err := New(Options{URL: srv.URL(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	l := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1000, Window: time.Hour}
	for _, n := range []int{1, 2, 50, DefaultMaxBatch} {
		reqs := make([]stack.AllotRequest, n)
		for i := range reqs {
			reqs[i] = stack.AllotRequest{Key: fmt.Sprintf("many%d:%d", n, i), Limit: l, Want: int64(i%7 + 1)}
		}
		out := make([]stack.Allotment, n)
		before := s.Stats().Calls
		if err := s.Allot(ctx, reqs, out); err != nil {
			t.Fatalf("Allot of %d: %v", n, err)
		}
		if got := s.Stats().Calls - before; got != 1 {
			t.Errorf("Allot of %d requests: %d script calls, want 1", n, got)
		}
		for i, a := range out {
			if a.Granted != reqs[i].Want || a.Remaining != l.Quota-reqs[i].Want {
				t.Errorf("Allot of %d, request %d: granted %d, remaining %d; want %d, %d", n, i, a.Granted, a.Remaining, reqs[i].Want, l.Quota-reqs[i].Want)
			}
		}
	}
}

// TestAllotOneMasterStopped: on a real 3-master cluster with one master
// SIGSTOPped, Allots for keys on the two others all succeed (200 in a row,
// counted), while Allots for the stopped master's keys, sent all along from
// other goroutines, fail (timeout, then breaker open) and none succeeds.
// After SIGCONT they succeed again.
func TestAllotOneMasterStopped(t *testing.T) {
	t.Parallel() // its own server(s); it mostly waits out timeouts and pauses
	if testing.Short() {
		t.Skip("starts a Redis Cluster; skipped with -short")
	}
	c := redistest.StartCluster(t)
	st, err := New(Options{URL: c.URL(), Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	victim := c.Servers[0].Addr()
	l := sluice.Limit{Algorithm: sluice.GCRA, Quota: 1_000_000, Window: time.Second}
	var healthy, stopped []string
	for i := range 300 {
		k := fmt.Sprintf("allot-outage:%d", i)
		if st.nodeFor(slotOf(redisKey(st.prefix, l.Algorithm, k))).name() == victim {
			stopped = append(stopped, k)
		} else {
			healthy = append(healthy, k)
		}
	}
	if len(healthy) == 0 || len(stopped) == 0 {
		t.Fatalf("%d healthy and %d stopped keys, want both", len(healthy), len(stopped))
	}
	allot := func(key string) error {
		out := make([]stack.Allotment, 1)
		err := st.Allot(context.Background(), []stack.AllotRequest{{Key: key, Limit: l, Want: 10}}, out)
		if err == nil && out[0].Granted != 10 {
			err = fmt.Errorf("granted %d, want 10", out[0].Granted)
		}
		return err
	}
	// Warm: every master has run the script.
	for _, k := range append(healthy[:20:20], stopped[:10]...) {
		if err := allot(k); err != nil {
			t.Fatalf("warm Allot(%s): %v", k, err)
		}
	}

	c.Servers[0].Pause()
	paused := true
	defer func() {
		if paused {
			c.Servers[0].Resume()
		}
	}()
	var victimOK, victimFailed atomic.Int64
	var victimOther atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := g; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				err := allot(stopped[i%len(stopped)])
				switch {
				case err == nil:
					victimOK.Add(1)
				case errors.Is(err, sluice.ErrStoreTimeout) || errors.Is(err, sluice.ErrStoreUnavailable):
					victimFailed.Add(1)
				default:
					victimOther.Store(err)
				}
			}
		})
	}
	const n = 200
	ok := 0
	for i := range n {
		if err := allot(healthy[i%len(healthy)]); err != nil {
			t.Errorf("healthy key %d of %d, one master stopped: Allot = %v, want granted", i, n, err)
			continue
		}
		ok++
	}
	// The stopped master's Allots must have been failing meanwhile.
	for victimFailed.Load() == 0 && victimOther.Load() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	t.Logf("one master stopped: %d of %d healthy-key Allots granted; stopped master's keys: %d failed, %d granted",
		ok, n, victimFailed.Load(), victimOK.Load())
	if err := victimOther.Load(); err != nil {
		t.Errorf("stopped master's key: unexpected error %v, want a timeout or an open breaker", err)
	}
	if victimOK.Load() != 0 {
		t.Errorf("stopped master's keys: %d Allots granted while it was stopped, want 0", victimOK.Load())
	}
	c.Servers[0].Resume()
	paused = false
	deadline := time.Now().Add(20 * time.Second)
	for allot(stopped[0]) != nil {
		if time.Now().After(deadline) {
			t.Fatal("stopped master's key: Allot still failing 20s after SIGCONT")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
