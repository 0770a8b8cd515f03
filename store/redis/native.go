package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/algorithm"
	"github.com/sluice-rl/sluice/store/stack"
)

// The native path for fixed and sliding windows (Options.NativeFixedWindow,
// NativeSlidingWindow).
//
// Each (key, window) is its own integer key, prefix + "w" (a fixed
// window's; "v" a sliding window's) + the key's tagged name + ":" + the
// window index (nativeKey), in the same hash slot as the script's key. A
// group of window Takes is decided with native commands, pipelined with
// the batching the store does for scripts: per call one TIME (with the
// Redis clock), then per op (a sliding window: first a GET of the previous
// window's key) INCRBY cost (a Take of 0 < cost ≤ quota) or GET (a look, or
// a cost above the quota), and PEXPIREAT (PEXPIRE with a test clock) on a
// key the instance has not expired in this window yet: at the end of its
// window, or of the next one for a sliding window's key, which is read as
// the previous count there. No script runs. The store decides each op with
// algorithm.FixedWindow or SlidingWindow on the counts read and the call's
// TIME (nativeOp.decide).
//
// All-or-nothing: a group with an op over its quota is denied and what its
// INCRBYs charged is taken back by DECRBY (with the expiry again, so that a
// DECRBY can never leave a key without one) before the Take returns. While
// that charge stands (one round trip) a concurrent Take may see it and be
// denied near the limit; it is never admitted over the limit, since an
// INCRBY that admits returns a count that includes every charge standing,
// the denied ones' too (TestNativeContention counts both).
//
// Time: the window index is chosen before the call is sent, from the
// node's Redis clock as the store estimates it (offset from each call's
// TIME). The call's TIME, read in the same pipeline just before the
// charges, says which window Redis is in; a group whose key names another
// window (at a window's edge, by the estimate's error) is taken back like a
// denied one and sent again (up to nativeRetries times), so that every
// decision counts in the window Redis's TIME names when the call runs, as
// the script's does. With Options.Now the given time names the window.
//
// A group with a Charge, Refund or Reset on such a key runs scripts/native.lua
// (atomic, as exact as the script path, and announcing refunds and resets
// as driver.lua does). A group that mixes native window ops with other
// algorithms is refused with ErrNativeMixed: their states live in keys of
// two kinds that no one atomic step holds. Late replies are settled as on
// the script path (settleNativeLate): a pipeline carrying ops with
// UndoIfUnknown goes on waiting Options.LateReplyWait for its replies
// after its Takes failed at the timeout, then takes back those ops'
// charges, and every charge of a group that was over its quota. There is
// no deadline guard: a pipeline that reaches Redis late still charges, and
// is taken back so once its replies come; one without such ops keeps its
// charges until its window ends.

// ErrNativeMixed is returned by Take, with Options.NativeFixedWindow or
// NativeSlidingWindow, for a batch that mixes native window ops with ops of
// other algorithms and holds both a Charge, Refund, Reset or release and a
// Take that can be denied. Send them in Takes of their own. Nothing was
// applied.
var ErrNativeMixed = errors.New("redis: with native windows, a batch may not mix native window ops with other algorithms when it holds both an action or release and a take")

// ErrNativePaired is returned by Take, with Options.NativeFixedWindow or
// NativeSlidingWindow, for a reservation of reserve-then-settle
// (sluice.Op.Lease) on such a window without sluice.Op.Script: its record
// lives beside the script path's key, which the native path's other ops of
// that counter (a plain Take, a charge, a reset) would not count in. Send
// it with Script (as a rule's reservation is), use another algorithm, or
// the script path. Nothing was applied.
var ErrNativePaired = errors.New("redis: with native windows, a native window limit cannot hold reservations")

// nativeRetries bounds how often a group is sent again because its window
// was not the one Redis's TIME named.
const nativeRetries = 3

// nativeLetters mark per-window keys: 'w' a fixed window's, 'v' a sliding
// window's, the letters of windowLetters' keys in the same order
// (algLetter's letters name the script's keys).
const nativeLetters = "wv"

var windowLetters = algLetter[sluice.FixedWindow] + algLetter[sluice.SlidingWindow]

// swapLetter returns the letter of to at c's place in from, or 0 when c is
// not in from: nativeLetters for windowLetters' letters, and back.
func swapLetter(c byte, from, to string) byte {
	if i := strings.IndexByte(from, c); i >= 0 {
		return to[i]
	}
	return 0
}

// expCacheMax bounds the keys the store remembers having expired; past it
// the memory is cleared (their next charge sends the expiry again).
const expCacheMax = 1 << 16

// nativeOp is one op of a native group.
type nativeOp struct {
	name      string           // the script's key (prefix + letter + tagged key), announced
	alg       sluice.Algorithm // FixedWindow or SlidingWindow
	q, w      int64
	cost      int64
	kind      byte // 't' take, '+' charge, '-' refund, 'x' reset
	id        int64
	key       string // per-window key of id, set when sent
	prevKey   string // sliding_window: per-window key of id−1, set when sent
	reply     int    // index of its INCRBY or GET in the call's pipeline
	prevReply int    // sliding_window: index of prevKey's GET
	incr      bool
	probe     bool // a GET sent for a take its keys' last counts say is over
	expSent   bool
	look      [5]int64 // an admitted charge's result as a look at the count before it
}

// last returns the last window o's per-window key of window id is read in:
// id for a fixed window, id+1 for a sliding window (where it is the
// previous window's count).
func (o *nativeOp) last() int64 {
	if o.alg == sluice.SlidingWindow {
		return o.id + 1
	}
	return o.id
}

// decide returns the algorithm's decision for cost at now (in window
// o.id) on the counts cur (window o.id's, before o's own charge) and prev
// (window o.id−1's; a sliding window only).
func (o *nativeOp) decide(cur, prev, now, cost int64) algorithm.Decision {
	p := algorithm.Params{Quota: o.q, Window: o.w}
	st := algorithm.WindowState{ID: o.id, Cur: cur, Prev: prev}
	var d algorithm.Decision
	if o.alg == sluice.SlidingWindow {
		_, d = algorithm.SlidingWindow(st, now, cost, p)
	} else {
		_, d = algorithm.FixedWindow(st, now, cost, p)
	}
	return d
}

// resultOf writes d as a request's five result values.
func resultOf(v []int64, d algorithm.Decision) {
	v[0], v[1], v[2], v[3], v[4] = int64(d.Reason), d.Remaining, d.ResetAfter, d.RetryAfter, d.Delay
}

// undoNative appends to cmds the commands that take back o's charge (DECRBY,
// with the expiry again, so that a DECRBY never leaves a key without one).
func (s *Store) undoNative(cmds []rueidis.Completed, o *nativeOp, now int64) []rueidis.Completed {
	return append(cmds, s.client.B().Decrby().Key(o.key).Decrement(o.cost).Build(), s.expire(o.key, o.last(), o.w, now))
}

// nativeGroup is the native part of a request.
type nativeGroup struct {
	ops     []nativeOp
	script  bool // holds an action: runs scripts/native.lua
	tries   int
	retry   bool
	charge  bool // the last call probed and found room: charge this time
	batcher *batcher
}

// nativeKey returns the per-window key of a script key name (redisKey's,
// of a fixed or sliding window) and window index.
func nativeKey(prefix, name string, id int64) string {
	return prefix + string(swapLetter(name[len(prefix)], windowLetters, nativeLetters)) + name[len(prefix)+1:] + ":" + strconv.FormatInt(id, 10)
}

// nativeBase maps a per-window key back to the script key name it was made
// from, or false.
func nativeBase(prefix, rk string) (string, bool) {
	rest, ok := strings.CutPrefix(rk, prefix)
	if !ok || rest == "" {
		return "", false
	}
	letter := swapLetter(rest[0], nativeLetters, windowLetters)
	if letter == 0 {
		return "", false
	}
	i := strings.LastIndexByte(rest, ':')
	if i < 1 {
		return "", false
	}
	if _, err := strconv.ParseInt(rest[i+1:], 10, 64); err != nil {
		return "", false
	}
	return prefix + string(letter) + rest[1:i], true
}

// isNative reports whether op is decided on the native path: a
// fixed_window op with Options.NativeFixedWindow, a sliding_window op with
// Options.NativeSlidingWindow, unless it asks for the script
// (sluice.Op.Script); a Reset always is (native.lua clears the script's key
// too, so that a reset finds the counter on either path).
func (s *Store) isNative(op *sluice.Op) bool {
	var on bool
	switch op.Limit.Algorithm {
	case sluice.FixedWindow:
		on = s.natFixed
	case sluice.SlidingWindow:
		on = s.natSliding
	}
	return on && (!op.Script || op.Action == sluice.Reset)
}

// nativeGroupOf reports whether ops (with Options.NativeFixedWindow) are
// all native ops, for the native path, or mix them with ops for the
// script.
func (s *Store) nativeGroupOf(ops []sluice.Op) (nat, mixed bool) {
	fw, other := false, false
	for i := range ops {
		if s.isNative(&ops[i]) {
			fw = true
		} else {
			other = true
		}
	}
	return fw && !other, fw && other
}

// takeMixed decides a batch of fixed_window ops and ops of other
// algorithms, with Options.NativeFixedWindow: the fixed windows first on
// the native path, then, if they were admitted, the others on the script
// path; if those are denied (or fail), the native charges are taken back
// (DECRBY), so that the batch stays all-or-nothing, with the same
// transient as a denied native group. If the fixed windows are denied, the
// other ops are sent as looks. A batch of Charges, Refunds, Resets,
// releases and looks, none of which can be denied, has each path apply its
// part (one that fails leaves the other's applied, as across Cluster
// slots); one that mixes them with Takes that can be denied is refused
// with ErrNativeMixed: an action applied on one path cannot be taken back
// when the other denies.
func (s *Store) takeMixed(ctx context.Context, ops []sluice.Op, results []sluice.Result, now string) error {
	action, deniable := kinds(ops)
	release := slices.ContainsFunc(ops, func(op sluice.Op) bool { return op.Release })
	if (action >= 0 || release) && deniable >= 0 {
		what := fmt.Sprintf("op %q (%v)", ops[max(action, 0)].Key, ops[max(action, 0)].Action)
		if action < 0 {
			what = "a release"
		}
		return fmt.Errorf("redis: %s and a take of %q (cost %d) in a batch of fixed_window and %v ops: %w",
			what, ops[deniable].Key, ops[deniable].Cost, ops[deniable].Limit.Algorithm, ErrNativeMixed)
	}
	var fw, other []int
	for i := range ops {
		if s.isNative(&ops[i]) {
			fw = append(fw, i)
		} else {
			other = append(other, i)
		}
	}
	sub := func(idx []int) ([]sluice.Op, []sluice.Result) {
		o := make([]sluice.Op, len(idx))
		for k, i := range idx {
			o[k] = ops[i]
		}
		return o, make([]sluice.Result, len(idx))
	}
	nops, nres := sub(fw)
	if action >= 0 || release {
		oops, ores := sub(other)
		_, nerr := s.takeNative(ctx, nops, nres, now)
		serr := s.takeScript(ctx, oops, ores, now)
		for k, i := range fw {
			results[i] = nres[k]
		}
		for k, i := range other {
			results[i] = ores[k]
		}
		return errors.Join(nerr, serr)
	}
	r, err := s.takeNative(ctx, nops, nres, now)
	if err != nil {
		return err
	}
	oops, ores := sub(other)
	if r.denied() {
		for k := range oops {
			oops[k].Cost, oops[k].UndoIfUnknown = 0, false // looks
		}
	}
	err = s.takeScript(ctx, oops, ores, now)
	allowed := err == nil
	for k := range ores {
		allowed = allowed && ores[k].Allowed
	}
	if !r.denied() && !allowed {
		if berr := s.takeBack(r); berr != nil && err == nil {
			err = fmt.Errorf("redis: taking back the fixed windows' charges after the other ops were denied (charges may remain): %w", berr)
		}
		for k := range nres {
			if o := &r.nat.ops[k]; o.incr {
				// Reported as a look at the count before the charge.
				nres[k].Remaining = o.look[1]
				nres[k].ResetAfter = time.Duration(o.look[2]) * time.Microsecond
			}
		}
	}
	if err != nil {
		return err
	}
	for k, i := range fw {
		results[i] = nres[k]
	}
	for k, i := range other {
		results[i] = ores[k]
	}
	return nil
}

// takeBack takes back what the native group r, admitted, charged.
func (s *Store) takeBack(r *request) error {
	var cmds []rueidis.Completed
	for k := range r.nat.ops {
		if o := &r.nat.ops[k]; o.incr {
			cmds = s.undoNative(cmds, o, r.nowOut)
		}
	}
	if len(cmds) == 0 {
		return nil
	}
	s.nativeTakenBack.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	for _, res := range s.client.DoMulti(ctx, cmds...) {
		if err := res.Error(); err != nil {
			s.refundFailures.Add(1)
			return err
		}
	}
	return nil
}

// newNativeRequest builds the native group of ops (all fixed and sliding
// windows).
func (s *Store) newNativeRequest(ops []sluice.Op, now string) *request {
	r := &request{mode: modeDecide, now: now, done: make(chan struct{})}
	g := &nativeGroup{ops: make([]nativeOp, len(ops))}
	r.nat = g
	if len(ops) == 1 {
		r.keys = r.key1[:]
	} else {
		r.keys = make([]string, len(ops))
	}
	for i := range ops {
		op := &ops[i]
		p := stack.Params(op.Limit)
		r.keys[i] = redisKey(s.prefix, op.Limit.Algorithm, op.Key)
		o := nativeOp{name: r.keys[i], alg: op.Limit.Algorithm, q: p.Quota, w: p.Window, cost: op.Cost, kind: 't'}
		switch op.Action {
		case sluice.Charge:
			o.kind = '+'
		case sluice.Refund:
			o.kind = '-'
		case sluice.Reset:
			o.kind = 'x'
		}
		g.script = g.script || o.kind != 't'
		g.ops[i] = o
		if op.UndoIfUnknown && o.kind == 't' && op.Cost > 0 && s.lateWait > 0 {
			if r.unknown == nil {
				r.unknown = make([]bool, len(ops))
			}
			r.unknown[i] = true
		}
	}
	if g.script {
		r.unknown = nil // actions are not settled late (as on the script path)
	}
	return r
}

// nativeBatcher returns the batcher of native calls for slot (-1: the
// single node).
func (s *Store) nativeBatcher(slot int) *batcher {
	if slot < 0 {
		return &s.natOne
	}
	p := &s.natSlots[slot]
	if b := p.Load(); b != nil {
		return b
	}
	b := &batcher{s: s, slot: slot, native: true}
	if p.CompareAndSwap(nil, b) {
		return b
	}
	return p.Load()
}

// takeNative decides ops (all native: fixed and sliding windows) on the native path, and
// returns their group.
func (s *Store) takeNative(ctx context.Context, ops []sluice.Op, results []sluice.Result, now string) (*request, error) {
	slot := -1
	if s.cluster {
		slot = slotOf(redisKey(s.prefix, ops[0].Limit.Algorithm, ops[0].Key))
		for i := 1; i < len(ops); i++ {
			if slotOf(redisKey(s.prefix, ops[i].Limit.Algorithm, ops[i].Key)) != slot {
				// One pipeline may span slots (each command goes to its
				// node) but native.lua may not.
				action, deniable := kinds(ops)
				if action < 0 {
					break
				}
				if deniable >= 0 {
					return nil, fmt.Errorf("redis: op %q (%v) and op %q (take, cost %d): %w",
						ops[action].Key, ops[action].Action, ops[deniable].Key, ops[deniable].Cost, ErrCrossSlotAction)
				}
				// Actions and looks alone, as the script path does: each
				// slot decides its part (one that fails leaves the others
				// applied).
				return nil, s.takeNativeSlots(ctx, ops, results, now)
			}
		}
	}
	n := s.nodeFor(slot)
	if n.open() {
		return nil, n.unavailable()
	}
	r := s.newNativeRequest(ops, now)
	b := s.nativeBatcher(slot)
	r.nat.batcher = b
	if err := s.do(ctx, b, r); err != nil {
		return nil, err
	}
	r.results(ops, results, !r.denied())
	return r, nil
}

// takeNativeSlots decides a batch of actions and looks across slots, one
// native call per slot.
func (s *Store) takeNativeSlots(ctx context.Context, ops []sluice.Op, results []sluice.Result, now string) error {
	bySlot := map[int][]int{}
	var order []int
	for i := range ops {
		sl := slotOf(redisKey(s.prefix, ops[i].Limit.Algorithm, ops[i].Key))
		if _, ok := bySlot[sl]; !ok {
			order = append(order, sl)
		}
		bySlot[sl] = append(bySlot[sl], i)
	}
	for _, sl := range order {
		idx := bySlot[sl]
		sub, res := make([]sluice.Op, len(idx)), make([]sluice.Result, len(idx))
		for k, i := range idx {
			sub[k] = ops[i]
		}
		if _, err := s.takeNative(ctx, sub, res, now); err != nil {
			return err
		}
		for k, i := range idx {
			results[i] = res[k]
		}
	}
	return nil
}

// expCache remembers the per-window keys this store has set an expiry on.
type expCache struct {
	mu sync.Mutex
	m  map[string]struct{}
}

func (c *expCache) has(k string) bool {
	c.mu.Lock()
	_, ok := c.m[k]
	c.mu.Unlock()
	return ok
}

func (c *expCache) add(k string) {
	c.mu.Lock()
	if c.m == nil || len(c.m) >= expCacheMax {
		c.m = make(map[string]struct{})
	}
	c.m[k] = struct{}{}
	c.mu.Unlock()
}

// countHints remembers the last count each per-window key was seen to
// hold (committed charges as this store last read them).
type countHints struct {
	mu sync.Mutex
	m  map[string]int64
}

func (c *countHints) get(k string) (int64, bool) {
	c.mu.Lock()
	v, ok := c.m[k]
	c.mu.Unlock()
	return v, ok
}

func (c *countHints) set(k string, v int64) {
	c.mu.Lock()
	if c.m == nil || len(c.m) >= expCacheMax {
		c.m = make(map[string]int64)
	}
	c.m[k] = v
	c.mu.Unlock()
}

// expire returns the command that gives key (of window id, width w µs) its
// expiry: with the Redis clock at the window's end plus the margin, with a
// test clock (now given) when the window ends, at least MinTTL.
func (s *Store) expire(key string, id, w, now int64) rueidis.Completed {
	if s.now == nil {
		at := ((id+1)*w+999)/1000 + s.natMargin
		return s.client.B().Pexpireat().Key(key).MillisecondsTimestamp(at).Build()
	}
	ms := max(((id+1)*w-now+999)/1000, s.minTTLms)
	return s.client.B().Pexpire().Key(key).Milliseconds(ms).Build()
}

// redisNow returns the node's Redis time as estimated (µs), first asking
// Redis when there is no estimate yet.
func (s *Store) redisNow(n *node) (int64, error) {
	if t, ok := n.clock.now(); ok {
		return t, nil
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	t, err := parseTime(s.client.Do(ctx, s.client.B().Time().Build()))
	if err != nil {
		return 0, err
	}
	n.clock.sample(t, start, time.Since(start))
	t, _ = n.clock.now()
	return t, nil
}

// parseTime reads a TIME reply as µs.
func parseTime(res rueidis.RedisResult) (int64, error) {
	arr, err := res.ToArray()
	if err != nil {
		return 0, fmt.Errorf("TIME: %w", err)
	}
	if len(arr) != 2 {
		return 0, fmt.Errorf("TIME: %d values, want 2", len(arr))
	}
	var v [2]int64
	for i := range v {
		str, err := arr[i].ToString()
		if err != nil {
			return 0, fmt.Errorf("TIME: %w", err)
		}
		if v[i], err = strconv.ParseInt(str, 10, 64); err != nil {
			return 0, fmt.Errorf("TIME: %w", err)
		}
	}
	return v[0]*1_000_000 + v[1], nil
}

// execNative runs one native call for batch (see the file comment) and
// completes its requests, or sends again those whose window was not
// Redis's.
func (s *Store) execNative(slot int, batch []*request) {
	live := batch[:0]
	for _, r := range batch {
		if r.nat.tries > 0 || r.state.CompareAndSwap(reqQueued, reqSent) {
			live = append(live, r)
		}
	}
	batch = live
	if len(batch) == 0 {
		return
	}
	n := s.nodeFor(slot)
	var plain []*request
	for _, r := range batch {
		if r.nat.script {
			s.execNativeScript(n, r)
		} else {
			plain = append(plain, r)
		}
	}
	if len(plain) > 0 {
		s.execNativePipeline(n, plain)
	}
}

// fail completes rs with err.
func fail(rs []*request, err error) {
	for _, r := range rs {
		r.err = err
		close(r.done)
	}
}

// execNativePipeline decides groups of native Takes in one pipeline.
func (s *Store) execNativePipeline(n *node, batch []*request) {
	report, err := n.allow()
	if err != nil {
		fail(batch, err)
		return
	}
	var est int64
	if s.now == nil {
		if est, err = s.redisNow(n); err != nil {
			outcome := classify(err, s.closed.Load())
			report(outcome, err)
			fail(batch, s.callError(fmt.Sprintf("redis: TIME to %s", n.name()), err, outcome, s.closed.Load()))
			return
		}
	}
	cmds := make([]rueidis.Completed, 0, 2+2*len(batch))
	if s.now == nil {
		cmds = append(cmds, s.client.B().Time().Build())
	}
	nops := 0
	for _, r := range batch {
		now := est
		if s.now != nil {
			now, _ = strconv.ParseInt(r.now, 10, 64)
		}
		for k := range r.nat.ops {
			o := &r.nat.ops[k]
			nops++
			o.id = algorithm.FloorDiv(now, o.w)
			o.key = nativeKey(s.prefix, o.name, o.id)
			if o.alg == sluice.SlidingWindow {
				o.prevKey = nativeKey(s.prefix, o.name, o.id-1)
				o.prevReply = len(cmds)
				cmds = append(cmds, s.client.B().Get().Key(o.prevKey).Build())
			}
			o.reply = len(cmds)
			o.incr = o.cost > 0 && o.cost <= o.q
			o.expSent, o.probe = false, false
			if o.incr && !r.nat.charge && s.seenFull(o, now) {
				// Last seen full: look first, so that a take that is
				// denied leaves no transient charge to deny others.
				o.incr, o.probe = false, true
			}
			if !o.incr {
				cmds = append(cmds, s.client.B().Get().Key(o.key).Build())
				continue
			}
			cmds = append(cmds, s.client.B().Incrby().Key(o.key).Increment(o.cost).Build())
			if !s.expired.has(o.key) {
				o.expSent = true
				cmds = append(cmds, s.expire(o.key, o.last(), o.w, now))
			}
		}
	}
	s.nativeCalls.Add(1)
	s.groups.Add(uint64(len(batch)))
	s.opsDecided.Add(uint64(nops))
	start := time.Now()
	var (
		resps []rueidis.RedisResult
		late  <-chan []rueidis.RedisResult
	)
	if s.lateWait > 0 && slices.ContainsFunc(batch, func(r *request) bool { return r.unknown != nil }) {
		resps, late = s.doLingering(cmds)
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		resps = s.client.DoMulti(ctx, cmds...)
		cancel()
	}
	took := time.Since(start)
	if late != nil {
		err = context.DeadlineExceeded // as a pipeline whose context ended would fail
	} else {
		err = pipelineError(resps)
	}
	var redisTime int64
	if err == nil && s.now == nil {
		if redisTime, err = parseTime(resps[0]); err == nil {
			n.clock.sample(redisTime, start, took)
		}
	}
	closed := s.closed.Load()
	outcome := classify(err, closed)
	report(outcome, err)
	if s.callHook != nil {
		s.callHook(took, outcome)
	}
	if err != nil {
		if late != nil {
			go s.settleNativeLate(batch, late)
		}
		fail(batch, s.callError(fmt.Sprintf("redis: native call (%d groups, %d ops) to %s", len(batch), nops, n.name()), err, outcome, closed))
		return
	}
	var follow []rueidis.Completed
	for _, r := range batch {
		now := redisTime
		if s.now != nil {
			now, _ = strconv.ParseInt(r.now, 10, 64)
		}
		r.nowOut = now
		g := r.nat
		g.retry = false
		reps, denied := s.groupReplies(g, resps, now)
		probedRoom := false
		for k := range g.ops {
			o, rp := &g.ops[k], &reps[k]
			if algorithm.FloorDiv(now, o.w) != o.id {
				g.retry = true
			}
			if o.incr && !o.expSent && rp.val == o.cost {
				// The key was made (or was 0) since this store expired
				// it: expire it again.
				follow = append(follow, s.expire(o.key, o.last(), o.w, now))
			}
			if o.probe && rp.d.OK() {
				probedRoom = true
			}
			if o.incr && denied {
				s.hints.set(o.key, rp.before) // taken back below
			} else {
				s.hints.set(o.key, rp.val)
			}
			if o.alg == sluice.SlidingWindow {
				s.hints.set(o.prevKey, rp.prev)
			}
		}
		if probedRoom && !denied {
			g.retry, g.charge = true, true // there is room: charge next time
		}
		if denied || g.retry {
			for k := range g.ops {
				if o := &g.ops[k]; o.incr {
					follow = s.undoNative(follow, o, now)
				}
			}
			if g.retry {
				if !g.charge {
					s.nativeRetries.Add(1)
				}
				continue
			}
			s.nativeTakenBack.Add(1)
		}
		if len(g.ops) == 1 {
			r.res = r.res1[:]
		} else {
			r.res = make([]int64, 5*len(g.ops))
		}
		for k := range g.ops {
			o, rp := &g.ops[k], &reps[k]
			d := rp.d
			if d.OK() && (denied || o.incr) {
				// Admitted in a denied group: reported as a look at the
				// count before it; an admitted charge keeps that look for
				// takeMixed, should it be taken back.
				look := o.decide(rp.before, rp.prev, now, 0)
				if denied {
					d = look
				}
				resultOf(o.look[:], look)
			}
			resultOf(r.res[5*k:5*k+5], d)
		}
	}
	if len(follow) > 0 {
		// Sent whatever the callers do: a charge taken back late is better
		// than one kept.
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		for _, res := range s.client.DoMulti(ctx, follow...) {
			if ferr := res.Error(); ferr != nil {
				s.refundFailures.Add(1)
				break
			}
		}
		cancel()
	}
	for _, r := range batch {
		g := r.nat
		if !g.retry {
			close(r.done)
			continue
		}
		if g.tries++; g.tries > nativeRetries+1 {
			r.err = fmt.Errorf("redis: native call: the window moved under the estimate of Redis's clock %d times", g.tries)
			close(r.done)
			continue
		}
		g.batcher.submit(r)
	}
}

// nativeReply is what a pipeline's replies say of one native op.
type nativeReply struct {
	val    int64 // what its INCRBY returned, or its GET read
	before int64 // the count before its own charge
	prev   int64 // a sliding window's previous window's count
	d      algorithm.Decision
}

// groupReplies reads native group g's replies in a pipeline's resps: per
// op its counts and the algorithm's decision on them at now, and whether
// an op was not admitted (the group is denied). It remembers the keys
// whose expiry the pipeline set.
func (s *Store) groupReplies(g *nativeGroup, resps []rueidis.RedisResult, now int64) (reps []nativeReply, denied bool) {
	reps = make([]nativeReply, len(g.ops))
	for k := range g.ops {
		o, rp := &g.ops[k], &reps[k]
		if o.alg == sluice.SlidingWindow {
			rp.prev = getInt(resps[o.prevReply])
		}
		if o.incr {
			rp.val, _ = resps[o.reply].AsInt64()
			rp.before = rp.val - o.cost
			if o.expSent {
				if ok, _ := resps[o.reply+1].AsInt64(); ok == 1 {
					s.expired.add(o.key)
				}
			}
		} else {
			rp.val = getInt(resps[o.reply])
			rp.before = rp.val
		}
		rp.d = o.decide(rp.before, rp.prev, now, o.cost)
		denied = denied || !rp.d.OK()
	}
	return reps, denied
}

// getInt reads a GET reply of a counter: 0 for a missing key.
func getInt(res rueidis.RedisResult) int64 {
	str, err := res.ToString()
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseInt(str, 10, 64)
	return v
}

// seenFull reports whether o's keys, as this store last saw them, leave no
// room for its cost at now (false when it saw neither).
func (s *Store) seenFull(o *nativeOp, now int64) bool {
	cur, ok := s.hints.get(o.key)
	var prev int64
	if o.alg == sluice.SlidingWindow {
		var seen bool
		prev, seen = s.hints.get(o.prevKey)
		ok = ok || seen
	}
	return ok && !o.decide(cur, prev, now, o.cost).OK()
}

// pipelineError returns the first error of a pipeline's replies (a nil
// reply, GET of a missing key, is none), or nil.
func pipelineError(resps []rueidis.RedisResult) error {
	for _, res := range resps {
		if err := res.Error(); err != nil && !rueidis.IsRedisNil(err) {
			return err
		}
	}
	return nil
}

// doLingering sends a native pipeline that carries ops to undo if unknown
// (lingering).
func (s *Store) doLingering(cmds []rueidis.Completed) ([]rueidis.RedisResult, <-chan []rueidis.RedisResult) {
	return lingering(s.timeout, s.lateWait, func(ctx context.Context) []rueidis.RedisResult {
		return s.client.DoMulti(ctx, cmds...)
	})
}

// settleNativeLate waits for the late replies of a native pipeline whose
// Takes already failed with sluice.ErrStoreTimeout (settleLate's
// counterpart). Per group it takes back (DECRBY, with the expiry again)
// what the pipeline charged: every charge of a group that was over its
// quota (the all-or-nothing taking back that a reply in time gets), and of
// a group that fitted, the charges of its ops to undo if unknown
// (Stats.LateCharged, LateRefunded, RefundFailures); its other charges
// stay, as on the script path. Replies that do not come within the late
// wait leave the outcome unknown (Stats.LateUnknown). It only reads the
// requests, whose callers have their error already.
func (s *Store) settleNativeLate(batch []*request, late <-chan []rueidis.RedisResult) {
	resps := <-late
	unknown := slices.ContainsFunc(batch, func(r *request) bool { return r.unknown != nil })
	if pipelineError(resps) != nil {
		if unknown {
			s.lateUnknown.Add(1) // no reply even now: the outcome stays unknown
		}
		return
	}
	var follow []rueidis.Completed
	refunded := 0
	var redisTime int64
	if s.now == nil {
		redisTime, _ = parseTime(resps[0])
	}
	for _, r := range batch {
		now := redisTime
		if s.now != nil {
			now, _ = strconv.ParseInt(r.now, 10, 64)
		}
		_, denied := s.groupReplies(r.nat, resps, now)
		back := false
		for k := range r.nat.ops {
			o := &r.nat.ops[k]
			if !o.incr || !(denied || r.unknown != nil && r.unknown[k]) {
				continue
			}
			back = true
			follow = s.undoNative(follow, o, now)
		}
		if back && !denied {
			s.lateCharged.Add(1)
			refunded++
		}
	}
	if len(follow) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout+s.lateWait)
	defer cancel()
	if pipelineError(s.client.DoMulti(ctx, follow...)) != nil {
		s.refundFailures.Add(1)
		return
	}
	s.lateRefunded.Add(uint64(refunded))
}

// execNativeScript decides a native group with an action by
// scripts/native.lua.
func (s *Store) execNativeScript(n *node, r *request) {
	report, err := n.allow()
	if err != nil {
		fail([]*request{r}, err)
		return
	}
	g := r.nat
	var now int64
	if s.now != nil {
		now, _ = strconv.ParseInt(r.now, 10, 64)
	} else if now, err = s.redisNow(n); err != nil {
		outcome := classify(err, s.closed.Load())
		report(outcome, err)
		fail([]*request{r}, s.callError(fmt.Sprintf("redis: TIME to %s", n.name()), err, outcome, s.closed.Load()))
		return
	}
	keys := make([]string, 2*len(g.ops))
	args := make([]string, 0, 4+7*len(g.ops))
	args = append(args, r.now, s.minTTL, strconv.FormatInt(s.natMargin, 10), s.channel)
	for k := range g.ops {
		o := &g.ops[k]
		o.id = algorithm.FloorDiv(now, o.w)
		o.key = nativeKey(s.prefix, o.name, o.id)
		keys[2*k], keys[2*k+1] = o.key, o.key
		alg := "f"
		if o.alg == sluice.SlidingWindow {
			o.prevKey = nativeKey(s.prefix, o.name, o.id-1)
			keys[2*k+1], alg = o.prevKey, "s"
		}
		args = append(args, string(o.kind), alg, strconv.FormatInt(o.cost, 10), strconv.FormatInt(o.q, 10),
			strconv.FormatInt(o.w, 10), strconv.FormatInt(o.id, 10), o.name)
	}
	s.calls.Add(1)
	s.groups.Add(1)
	s.opsDecided.Add(uint64(len(g.ops)))
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	vals, err := s.nativeLua.Exec(ctx, s.client, keys, args).AsIntSlice()
	cancel()
	took := time.Since(start)
	if err == nil && len(vals) != 1+4*len(g.ops) && !(len(vals) == 2 && vals[0] == -1) {
		err = &replyError{fmt.Errorf("native.lua: %d values for %d ops", len(vals), len(g.ops))}
	}
	closed := s.closed.Load()
	outcome := classify(err, closed)
	report(outcome, err)
	if s.callHook != nil {
		s.callHook(took, outcome)
	}
	if err != nil {
		fail([]*request{r}, s.callError(fmt.Sprintf("redis: native script call (%d ops) to %s", len(g.ops), n.name()), err, outcome, closed))
		return
	}
	if s.now == nil {
		n.clock.sample(vals[boolInt(vals[0] == -1)], start, took)
	}
	if vals[0] == -1 {
		s.nativeRetries.Add(1)
		if g.tries++; g.tries > nativeRetries {
			r.err = fmt.Errorf("redis: native script call: the window moved under the estimate of Redis's clock %d times", g.tries)
			close(r.done)
			return
		}
		g.batcher.submit(r)
		return
	}
	r.nowOut = vals[0]
	if len(g.ops) == 1 {
		r.res = r.res1[:]
	} else {
		r.res = make([]int64, 5*len(g.ops))
	}
	for k := range g.ops {
		copy(r.res[5*k:5*k+4], vals[1+4*k:5+4*k])
		r.res[5*k+4] = 0
	}
	close(r.done)
}
