package redis

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/algorithm"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/storetest"
)

// newNativeStore is newTestStore with Options.NativeFixedWindow and
// NativeSlidingWindow.
func newNativeStore(t testing.TB, url string, c *storetest.Clock) *Store {
	t.Helper()
	opts := Options{URL: url, Prefix: fmt.Sprintf("t%x:", rand.Uint64()), Timeout: 2 * time.Second, NativeFixedWindow: true, NativeSlidingWindow: true}
	if c != nil {
		opts.Now = c.Now
	}
	s, err := New(opts)
	if err != nil {
		t.Fatalf("New(%q) = %v", url, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// nativeSkips are the parts of the conformance suite the native path does
// not honour, and why.
var nativeSkips = map[string]string{
	"Steps/fixed_window":         "a clock that goes back reopens the earlier window's key (TestNativeClockBack states the result)",
	"Steps/fixed_window/actions": "a refund at an instant of an earlier window gives back into that window's key (TestNativeClockBack)",
	"ActionBatch":                "a batch mixing fixed_window takes with other algorithms' actions is refused (ErrNativeMixed; TestNativeMixed: actions and looks alone are applied)",
	"Steps/fixed_window/pair":    "a reservation on a fixed_window is refused (ErrNativePaired; TestNativePaired)",
}

// scriptOnlyParts are the parts of the conformance suite that hold no
// fixed_window or sliding_window op: a store with native windows sends
// every one of their Takes down the script path (Take's nativeGroupOf),
// exactly as a store without them does, so TestConformanceSingle has run
// them already.
var scriptOnlyParts = map[string]string{
	"BucketsAgree":    "covered, not a gap: no window op, so the script path TestConformanceSingle runs",
	"RetryAfterLarge": "covered, not a gap: no window op, so the script path TestConformanceSingle runs",
}

// nativeSingleSkips are nativeSkips and, unless SLUICE_FULL_CONFORMANCE=1,
// scriptOnlyParts.
func nativeSingleSkips() map[string]string {
	skips := maps.Clone(nativeSkips)
	if !fullConformance() {
		maps.Copy(skips, scriptOnlyParts)
	}
	return skips
}

func TestNativeConformanceSingle(t *testing.T) {
	t.Parallel() // its own servers and fake clock: CPU, beside the tests that wait
	srv := redistest.Start(t)
	storetest.RunWith(t, func(t *testing.T, c *storetest.Clock) sluice.Store {
		return newNativeStore(t, srv.URL(), c)
	}, storetest.Options{Skip: nativeSingleSkips()})
}

// TestNativeConformanceCluster runs the parts of the suite that add
// something on a cluster (clusterSkips: the single-key traces are
// TestNativeConformanceSingle's decisions, sent to one node), among them the
// batches of fixed windows in several slots (Batch, BatchConcurrency) that
// the native path sends as one pipeline per slot and takes back across
// slots, and Keys, which finds the per-window keys on every node.
func TestNativeConformanceCluster(t *testing.T) {
	t.Parallel() // its own servers and fake clock: CPU, beside the tests that wait
	cl := redistest.StartCluster(t)
	storetest.RunWith(t, func(t *testing.T, c *storetest.Clock) sluice.Store {
		return newNativeStore(t, cl.URL(), c)
	}, storetest.Options{Skip: clusterSkips(t, nativeSkips)})
}

// TestNativeClockBack states what the native path answers where the
// conformance suite's clock goes back (the parts nativeSkips skips): the
// earlier window's key answers. It admits no more than its quota in that
// window, and with the Redis clock the window is TIME's.
func TestNativeClockBack(t *testing.T) {
	srv := redistest.Start(t)
	clock := storetest.NewClock()
	s := newNativeStore(t, srv.URL(), clock)
	l := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 3, Window: time.Second}
	sec := time.Second
	steps := []struct {
		at     time.Duration
		cost   int64
		action sluice.Action
		want   sluice.Result
	}{
		{0, 3, sluice.Take, sluice.Result{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: sec}},
		{sec, 1, sluice.Take, sluice.Result{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: sec}},
		// Back into window 0: its key, full, answers (memory answers
		// window 1's state: remaining 2).
		{999999 * time.Microsecond, 3, sluice.Take, sluice.Result{Reason: sluice.ReasonLimited, Limit: 3, Remaining: 0, ResetAfter: time.Microsecond, RetryAfter: time.Microsecond}},
		// A refund at an instant of window 0 gives back into window 0's key.
		{900 * time.Millisecond, 2, sluice.Refund, sluice.Result{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: 100 * time.Millisecond}},
		// Window 1 is untouched by it.
		{sec, 0, sluice.Take, sluice.Result{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: sec}},
	}
	for i, st := range steps {
		clock.Set(storetest.Epoch.Add(st.at))
		res := make([]sluice.Result, 1)
		err := s.Take(context.Background(), []sluice.Op{{Key: "back", Limit: l, Cost: st.cost, Action: st.action}}, res)
		if err != nil {
			t.Fatalf("step %d: %v", i+1, err)
		}
		st.want.At = clock.Now().UnixMicro() // decided at the test clock's reading
		if res[0] != st.want {
			t.Errorf("step %d: got %+v, want %+v", i+1, res[0], st.want)
		}
	}
}

// TestNativeMixed: a batch of native windows (fixed, then sliding) and
// other algorithms is all-or-nothing across the two paths, and one with an
// action is refused.
func TestNativeMixed(t *testing.T) {
	srv := redistest.Start(t)
	for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) { nativeMixed(t, srv.URL(), alg) })
	}
}

func nativeMixed(t *testing.T, url string, alg sluice.Algorithm) {
	s := newNativeStore(t, url, storetest.NewClock())
	fw := sluice.Op{Key: "mix:f", Limit: sluice.Limit{Algorithm: alg, Quota: 5, Window: time.Minute}, Cost: 1}
	gc := sluice.Op{Key: "mix:g", Limit: sluice.Limit{Algorithm: sluice.GCRA, Quota: 1, Window: time.Minute}, Cost: 1}
	take := func(ops ...sluice.Op) []sluice.Result {
		t.Helper()
		res := make([]sluice.Result, len(ops))
		if err := s.Take(context.Background(), ops, res); err != nil {
			t.Fatalf("Take: %v", err)
		}
		return res
	}
	if r := take(fw, gc); !r[0].Allowed || !r[1].Allowed || r[0].Remaining != 4 {
		t.Fatalf("first batch: got %+v, want both allowed, fixed window remaining 4", r)
	}
	// gcra now denies: the fixed window's charge is taken back.
	if r := take(fw, gc); r[0].Allowed != true || r[1].Allowed || r[0].Remaining != 4 {
		t.Fatalf("second batch: got %+v, want the window's uncharged state (allowed, remaining 4) and gcra denied", r)
	}
	look := fw
	look.Cost = 0
	if r := take(look); r[0].Remaining != 4 {
		t.Errorf("after the denied batch: remaining %d, want 4 (nothing charged)", r[0].Remaining)
	}
	refund := gc
	refund.Action = sluice.Refund
	err := s.Take(context.Background(), []sluice.Op{fw, refund}, make([]sluice.Result, 2))
	if !errors.Is(err, ErrNativeMixed) {
		t.Errorf("batch with a refund and a take: got %v, want ErrNativeMixed", err)
	}
	if r := take(look); r[0].Remaining != 4 {
		t.Errorf("after the refused batch: remaining %d, want 4", r[0].Remaining)
	}
	// Actions and looks alone, nothing deniable: each path applies its part.
	charge := fw
	charge.Action, charge.Cost = sluice.Charge, 2
	if r := take(charge, refund); r[0].Remaining != 2 {
		t.Errorf("batch of a charge and a refund: %+v, want the window charged (remaining 2)", r)
	}
	gcLook := gc
	gcLook.Cost = 0
	if r := take(look, gcLook); r[0].Remaining != 2 || r[1].Remaining != 1 {
		t.Errorf("after the charge and the refund: %+v, want the window at remaining 2 and gcra refunded (remaining 1)", r)
	}
}

// TestNativeWindowRetry: a group whose keys name another window than
// Redis's TIME (an estimate off at the edge, forced here) is taken back
// and sent again; the wrong window keeps nothing.
func TestNativeWindowRetry(t *testing.T) {
	srv := redistest.Start(t)
	s := newNativeStore(t, srv.URL(), nil)
	l := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 10, Window: time.Hour}
	op := sluice.Op{Key: "retry", Limit: l, Cost: 3}
	res := make([]sluice.Result, 1)
	if err := s.Take(context.Background(), []sluice.Op{op}, res); err != nil || !res[0].Allowed {
		t.Fatalf("first take: %+v, %v", res[0], err)
	}
	n := s.nodeFor(-1)
	n.clock.mu.Lock()
	n.clock.offset -= 2 * time.Hour.Microseconds() // two windows behind
	n.clock.mu.Unlock()
	if err := s.Take(context.Background(), []sluice.Op{op}, res); err != nil {
		t.Fatalf("take with a wrong estimate: %v", err)
	}
	if !res[0].Allowed || res[0].Remaining != 4 {
		t.Errorf("take with a wrong estimate: got %+v, want allowed, remaining 4", res[0])
	}
	if got := s.Stats().NativeRetries; got < 1 {
		t.Errorf("NativeRetries = %d, want ≥ 1", got)
	}
	now, err := parseTime(s.client.Do(context.Background(), s.client.B().Time().Build()))
	if err != nil {
		t.Fatal(err)
	}
	id := now/l.Window.Microseconds() - 2
	wrong := nativeKey(s.prefix, redisKey(s.prefix, sluice.FixedWindow, "retry"), id)
	v, err := s.client.Do(context.Background(), s.client.B().Get().Key(wrong).Build()).ToString()
	if err == nil && v != "0" {
		t.Errorf("the wrong window's key %s holds %q, want 0 or none", wrong, v)
	}
	ttl, err := s.client.Do(context.Background(), s.client.B().Pttl().Key(wrong).Build()).AsInt64()
	if err != nil || ttl == -1 {
		t.Errorf("the wrong window's key has PTTL %d (%v), want an expiry or none", ttl, err)
	}
}

// TestNativeContention: many goroutines take from one shared limit, each
// batch with a per-goroutine key too, on the Redis clock, for a fixed and a
// sliding window (its previous window holding half the quota, so that the
// weighted term counts). Admissions never exceed what the algorithm allows
// (the quota, less the previous window's weighted count at the last
// instant); the shared key ends holding exactly what was admitted and each
// goroutine's key what its batches were admitted (a denied batch charges
// nothing in the end). Spurious denials (denied while the admitted count
// left room: a transient charge of a batch that was then denied) are
// counted and logged.
func TestNativeContention(t *testing.T) {
	srv := redistest.Start(t)
	for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) { nativeContention(t, srv.URL(), alg) })
	}
}

func nativeContention(t *testing.T, url string, alg sluice.Algorithm) {
	s := newNativeStore(t, url, nil)
	const (
		quota      = 500
		goroutines = 64
		perG       = 40
	)
	shared := sluice.Limit{Algorithm: alg, Quota: quota, Window: 24 * time.Hour}
	own := sluice.Limit{Algorithm: alg, Quota: 1 << 40, Window: 24 * time.Hour}
	day := func() int64 { return time.Now().UTC().Unix() / 86400 }
	startDay := day()
	ctx := context.Background()
	sharedName := redisKey(s.prefix, alg, "shared")
	var prev int64
	if alg == sluice.SlidingWindow {
		prev = quota / 2
		if err := s.client.Do(ctx, s.client.B().Set().Key(nativeKey(s.prefix, sharedName, startDay-1)).Value("250").Ex(time.Hour).Build()).Error(); err != nil {
			t.Fatalf("SET of the previous window: %v", err)
		}
	}
	var (
		mu       sync.Mutex
		admitted int64
		perOwn   = make([]int64, goroutines)
		denied   int
	)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perG {
				cost := int64(1 + (g+i)%3)
				ops := []sluice.Op{
					{Key: fmt.Sprintf("own%d", g), Limit: own, Cost: cost},
					{Key: "shared", Limit: shared, Cost: cost},
				}
				res := make([]sluice.Result, 2)
				if err := s.Take(ctx, ops, res); err != nil {
					t.Errorf("Take: %v", err)
					return
				}
				mu.Lock()
				if res[1].Allowed {
					admitted += cost
					perOwn[g] += cost
				} else {
					denied++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	look := func(key string, l sluice.Limit) sluice.Result {
		res := make([]sluice.Result, 1)
		if err := s.Take(ctx, []sluice.Op{{Key: key, Limit: l}}, res); err != nil {
			t.Fatalf("look: %v", err)
		}
		return res[0]
	}
	last := look("shared", shared)
	if day() != startDay {
		t.Skip("the run crossed a UTC day (the window's edge); counts span two windows")
	}
	// The weighted previous count at the last look: an upper bound of it at
	// every admission, which came earlier.
	w := shared.Window.Microseconds()
	var weighted int64
	if alg == sluice.SlidingWindow {
		e := 2*w - last.ResetAfter.Microseconds()
		weighted = (prev*(w-e) + w - 1) / w
	}
	if admitted > quota-weighted {
		t.Fatalf("admitted %d units, want ≤ quota %d − weighted previous window %d", admitted, quota, weighted)
	}
	count := func(key string) int64 {
		v, err := s.client.Do(ctx, s.client.B().Get().Key(nativeKey(s.prefix, redisKey(s.prefix, alg, key), startDay)).Build()).AsInt64()
		if err != nil && !rueidis.IsRedisNil(err) {
			t.Fatalf("GET of %q's window: %v", key, err)
		}
		return v
	}
	if got := count("shared"); got != admitted {
		t.Errorf("shared key holds %d, want %d admitted (a denied batch must charge nothing)", got, admitted)
	}
	if got, want := quota-last.Remaining, admitted+weighted; got != want {
		t.Errorf("look at the shared key: %d used, want %d", got, want)
	}
	for g := range goroutines {
		if got := count(fmt.Sprintf("own%d", g)); got != perOwn[g] {
			t.Errorf("own%d holds %d, want %d", g, got, perOwn[g])
		}
	}
	t.Logf("%v: %d attempts, %d denied, %d units admitted of %d (previous window weighted %d); take-backs %d, pipelines %d",
		alg, goroutines*perG, denied, admitted, quota, weighted, s.Stats().NativeTakenBack, s.Stats().NativeCalls)
}

// TestNativeSpuriousDenials counts the denials the take-back causes, for a
// fixed and a sliding window: a shared limit is filled to quota − fits;
// then 60 goroutines hammer it with takes that must be denied (cost
// fits + 1) while 4 goroutines send fits takes of cost 1, every one of
// which fits what was admitted. A fit denied
// is a spurious denial (it met a transient charge of a denied take); the
// figure is logged, and the counts of admissions are exact: never over the
// quota, the key holds exactly what was admitted.
func TestNativeSpuriousDenials(t *testing.T) {
	srv := redistest.Start(t)
	for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) { nativeSpuriousDenials(t, srv.URL(), alg) })
	}
}

func nativeSpuriousDenials(t *testing.T, url string, alg sluice.Algorithm) {
	s := newNativeStore(t, url, nil)
	const (
		quota   = 1000
		fits    = 100
		hammers = 60
	)
	l := sluice.Limit{Algorithm: alg, Quota: quota, Window: 24 * time.Hour}
	day := func() int64 { return time.Now().UTC().Unix() / 86400 }
	startDay := day()
	take := func(cost int64) (bool, error) {
		res := make([]sluice.Result, 1)
		err := s.Take(context.Background(), []sluice.Op{{Key: "spur", Limit: l, Cost: cost}}, res)
		return res[0].Allowed, err
	}
	if ok, err := take(quota - fits); !ok || err != nil {
		t.Fatalf("prefill: allowed %v, %v", ok, err)
	}
	stop := make(chan struct{})
	var hw, fw sync.WaitGroup
	var mu sync.Mutex
	hammered, hammerAdmitted := 0, 0
	for range hammers {
		hw.Add(1)
		go func() {
			defer hw.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ok, err := take(fits + 1)
				if err != nil {
					t.Errorf("hammer: %v", err)
					return
				}
				mu.Lock()
				hammered++
				if ok {
					hammerAdmitted++
				}
				mu.Unlock()
			}
		}()
	}
	time.Sleep(50 * time.Millisecond) // let the hammers run
	fitAdmitted, fitDenied := 0, 0
	for range 4 {
		fw.Add(1)
		go func() {
			defer fw.Done()
			for range fits / 4 {
				ok, err := take(1)
				if err != nil {
					t.Errorf("fit: %v", err)
					return
				}
				mu.Lock()
				if ok {
					fitAdmitted++
				} else {
					fitDenied++
				}
				mu.Unlock()
			}
		}()
	}
	fw.Wait()
	close(stop)
	hw.Wait()
	if day() != startDay {
		t.Skip("the run crossed a UTC day (the window's edge)")
	}
	if hammerAdmitted != 0 {
		t.Errorf("%d takes of cost %d admitted over the quota, want 0", hammerAdmitted, fits+1)
	}
	res := make([]sluice.Result, 1)
	if err := s.Take(context.Background(), []sluice.Op{{Key: "spur", Limit: l}}, res); err != nil {
		t.Fatal(err)
	}
	if held, want := quota-res[0].Remaining, int64(quota-fits+fitAdmitted); held != want {
		t.Errorf("key holds %d, want %d (prefill + admitted fits)", held, want)
	}
	t.Logf("%v: spurious denials: %d of %d takes that fit (%.1f%%), under %d denied takes of cost %d from %d goroutines",
		alg, fitDenied, fits, 100*float64(fitDenied)/fits, hammered, fits+1, hammers)
}

// TestNativePaired: with native fixed windows, a reservation on a
// fixed_window limit is refused (ErrNativePaired) and charges nothing; one
// on another algorithm takes the script path.
func TestNativePaired(t *testing.T) {
	srv := redistest.Start(t)
	c := storetest.NewClock()
	s := newNativeStore(t, srv.URL(), c)
	fw := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 10, Window: time.Minute}
	op := sluice.Op{Key: "np", Limit: fw, Cost: 3, Lease: 7, SettleWithin: time.Minute}
	res := make([]sluice.Result, 1)
	if err := s.Take(context.Background(), []sluice.Op{op}, res); !errors.Is(err, ErrNativePaired) {
		t.Fatalf("reservation on a native fixed window: %v, want ErrNativePaired", err)
	}
	if err := s.Take(context.Background(), []sluice.Op{{Key: "np", Limit: fw}}, res); err != nil || res[0].Remaining != 10 {
		t.Fatalf("look after the refusal: %+v, %v; want 10 remaining", res[0], err)
	}
	op.Limit = sluice.Limit{Algorithm: sluice.GCRA, Quota: 10, Window: time.Minute}
	if err := s.Take(context.Background(), []sluice.Op{op}, res); err != nil || !res[0].Allowed || res[0].Remaining != 7 {
		t.Fatalf("reservation on gcra: %+v, %v; want allowed, 7 remaining", res[0], err)
	}
	// With Script (a fixed_window rule on the script path) the reservation
	// is kept by the script, as on a store without native counters.
	op.Key, op.Limit, op.Script = "np-script", fw, true
	if err := s.Take(context.Background(), []sluice.Op{op}, res); err != nil || !res[0].Allowed || res[0].Remaining != 7 {
		t.Fatalf("reservation on a fixed window with Script: %+v, %v; want allowed, 7 remaining", res[0], err)
	}
}

// TestNativeScriptOp: on a store with native fixed and sliding windows,
// ops with Script (rate_limit.redis_path: script) are counted by the script
// in its key, apart from the native ops' per-window keys; a Reset, with or
// without Script, clears the counter on both paths (a sliding window's
// previous window's key too).
func TestNativeScriptOp(t *testing.T) {
	srv := redistest.Start(t)
	for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) { nativeScriptOp(t, srv, alg) })
	}
}

func nativeScriptOp(t *testing.T, srv *redistest.Server, alg sluice.Algorithm) {
	c := storetest.NewClock()
	s := newNativeStore(t, srv.URL(), c)
	ctx := context.Background()
	fw := sluice.Limit{Algorithm: alg, Quota: 10, Window: time.Minute}
	take := func(op sluice.Op) sluice.Result {
		t.Helper()
		res := make([]sluice.Result, 1)
		if err := s.Take(ctx, []sluice.Op{op}, res); err != nil {
			t.Fatalf("Take(%+v): %v", op, err)
		}
		return res[0]
	}
	exists := func(key string) bool {
		t.Helper()
		n, err := srv.Do("EXISTS", key)
		if err != nil {
			t.Fatal(err)
		}
		return n == int64(1)
	}
	scriptKey := redisKey(s.prefix, alg, "k")
	windowKey := nativeKey(s.prefix, scriptKey, algorithm.FloorDiv(c.Now().UnixMicro(), fw.Window.Microseconds()))
	if r := take(sluice.Op{Key: "k", Limit: fw, Cost: 4, Script: true}); !r.Allowed || r.Remaining != 6 {
		t.Fatalf("script take: %+v, want allowed, 6 remaining", r)
	}
	if !exists(scriptKey) || exists(windowKey) {
		t.Fatalf("after a script take: script key %v, window key %v; want true, false", exists(scriptKey), exists(windowKey))
	}
	if r := take(sluice.Op{Key: "k", Limit: fw, Script: true}); r.Remaining != 6 {
		t.Errorf("script look: remaining %d, want 6", r.Remaining)
	}
	if r := take(sluice.Op{Key: "k", Limit: fw}); r.Remaining != 10 {
		t.Errorf("native look: remaining %d, want 10 (the paths count apart)", r.Remaining)
	}
	if r := take(sluice.Op{Key: "k", Limit: fw, Cost: 2}); !r.Allowed || r.Remaining != 8 || !exists(windowKey) {
		t.Fatalf("native take: %+v, window key %v; want allowed, 8 remaining, the window key made", r, exists(windowKey))
	}
	take(sluice.Op{Key: "k", Limit: fw, Action: sluice.Reset, Script: true})
	if exists(scriptKey) || exists(windowKey) {
		t.Errorf("after a reset: script key %v, window key %v; want both gone", exists(scriptKey), exists(windowKey))
	}
	if r := take(sluice.Op{Key: "k", Limit: fw, Script: true}); r.Remaining != 10 {
		t.Errorf("script look after the reset: remaining %d, want 10", r.Remaining)
	}
	if alg != sluice.SlidingWindow {
		return
	}
	// Counts in two windows: the previous one's weighs in, and a reset
	// clears both.
	take(sluice.Op{Key: "k", Limit: fw, Cost: 4})
	c.Advance(fw.Window + fw.Window/4)
	nextKey := nativeKey(s.prefix, scriptKey, algorithm.FloorDiv(c.Now().UnixMicro(), fw.Window.Microseconds()))
	// 10 − ⌈4 × 3/4⌉ − 2 = 5
	if r := take(sluice.Op{Key: "k", Limit: fw, Cost: 2}); !r.Allowed || r.Remaining != 5 || !exists(windowKey) || !exists(nextKey) {
		t.Fatalf("take in the next window: %+v, keys %v %v; want allowed, 5 remaining, both windows' keys", r, exists(windowKey), exists(nextKey))
	}
	take(sluice.Op{Key: "k", Limit: fw, Action: sluice.Reset})
	if exists(windowKey) || exists(nextKey) {
		t.Errorf("after a reset: keys %v %v, want both gone", exists(windowKey), exists(nextKey))
	}
	if r := take(sluice.Op{Key: "k", Limit: fw}); r.Remaining != 10 {
		t.Errorf("look after the reset: remaining %d, want 10", r.Remaining)
	}
}

// TestNativeLateReplyRefund: a native pipeline answered later than the
// store's timeout (a proxy holds Redis's replies) fails its Takes with
// ErrStoreTimeout at the usual time; once its replies come, the charges of
// ops with UndoIfUnknown are taken back, as on the script path
// (TestLateReplyRefund), and so are those of a group over its quota (the
// all-or-nothing taking back a reply in time gets); other charges stay.
func TestNativeLateReplyRefund(t *testing.T) {
	t.Parallel() // its own server; it mostly waits for late replies
	srv := redistest.Start(t)
	const timeout = 500 * time.Millisecond // only the held calls time out on a loaded machine
	direct, err := New(Options{URL: srv.URL(), NativeFixedWindow: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { direct.Close() })
	ctx := context.Background()
	window := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 10, Window: time.Hour}
	tests := []struct {
		name    string
		prefill map[string]int64 // charged through another store first
		ops     []sluice.Op
		// want is each op's remaining once the late replies are settled.
		want     []int64
		refunded uint64 // groups that fitted, refunded late
	}{
		{"undo", nil, []sluice.Op{{Key: "n1", Limit: window, Cost: 3, UndoIfUnknown: true}}, []int64{10}, 1},
		{"kept", nil, []sluice.Op{{Key: "n2", Limit: window, Cost: 3}}, []int64{7}, 0},
		{"group, one op undone", nil, []sluice.Op{
			{Key: "n3", Limit: window, Cost: 2, UndoIfUnknown: true},
			{Key: "n4", Limit: window, Cost: 5},
		}, []int64{10, 5}, 1},
		{"over the quota, taken back", map[string]int64{"n5": 9}, []sluice.Op{
			{Key: "n5", Limit: window, Cost: 3, UndoIfUnknown: true},
			{Key: "n6", Limit: window, Cost: 1},
		}, []int64{1, 10}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for key, n := range tt.prefill {
				if err := direct.Take(ctx, []sluice.Op{{Key: key, Limit: window, Cost: n}}, make([]sluice.Result, 1)); err != nil {
					t.Fatal(err)
				}
			}
			proxy := redistest.StartProxy(t, srv.Addr())
			st, err := New(Options{URL: proxy.URL(), Timeout: timeout, Breaker: patient, NativeFixedWindow: true})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			for range 5 { // calls that teach the store the node's clock
				if err := st.Take(ctx, []sluice.Op{{Key: "warm:" + tt.name, Limit: window, Cost: 1}}, make([]sluice.Result, 1)); err != nil {
					t.Fatal(err)
				}
			}
			before := st.Stats()
			proxy.SetReplyDelay(3 * timeout)
			start := time.Now()
			err = st.Take(ctx, tt.ops, make([]sluice.Result, len(tt.ops)))
			proxy.SetReplyDelay(0)
			if !errors.Is(err, sluice.ErrStoreTimeout) {
				t.Fatalf("Take with its replies held = %v, want ErrStoreTimeout", err)
			}
			// Until the late replies have come (at 3 × timeout) and been settled.
			looks := make([]sluice.Op, len(tt.ops))
			for i, op := range tt.ops {
				looks[i] = sluice.Op{Key: op.Key, Limit: op.Limit}
			}
			res := make([]sluice.Result, len(looks))
			settled := func() bool {
				if err := direct.Take(ctx, looks, res); err != nil {
					t.Fatal(err)
				}
				for i := range res {
					if res[i].Remaining != tt.want[i] {
						return false
					}
				}
				return st.Stats().LateRefunded-before.LateRefunded == tt.refunded
			}
			for time.Since(start) < 4*timeout || !settled() && time.Since(start) < time.Minute {
				time.Sleep(10 * time.Millisecond)
			}
			got := st.Stats()
			for i := range res {
				if res[i].Remaining != tt.want[i] {
					t.Errorf("%s: remaining %d after the late replies, want %d", looks[i].Key, res[i].Remaining, tt.want[i])
				}
			}
			checkLateSettled(t, before, got, tt.refunded)
		})
	}
}
