package redis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/algorithm"
	"github.com/sluice-rl/sluice/internal/cow"
	"github.com/sluice-rl/sluice/store/stack"
)

// Group modes of the driver script (scripts/driver.lua).
const (
	modeDecide = "0" // decide, all-or-nothing
	modeUndo   = "1" // decide, and report how to undo (part of a cross-slot Take)
	modeRefund = "2" // take back a group decided with modeUndo, then look
	modeAllot  = "3" // lease allotments (allot.go, scripts/allot.lua)
)

// opFields is the number of ARGV entries per op: limit, cost, lease.
const opFields = 3

// The cost field of an op: a Take's cost in decimal, or one of these (see
// scripts/driver.lua): "r" releases a lease, "+" and the cost charges it,
// "-" and the cost refunds it, "x" resets the key.

// request is one group: the ops of a Take in one batch target.
type request struct {
	mode   string
	now    string
	idx    []int // indices into the Take's ops; nil means all, in order
	keys   []string
	args   []string // group header and op fields, ready to append to ARGV
	leases []uint64 // lease ID offered to each acquire, else 0
	algs   algMask
	// one says the group is one Take of cost ≥ 0 (no release, no action,
	// mode decide) on a bucket or window key, or one allotment (allot.go),
	// and fast that it is such a Take: a call of such groups only runs
	// scripts/one.lua, of Takes alone scripts/fast.lua (see callKind).
	one, fast bool
	// fl is the fast group's limit as scripts/fast.lua reads it.
	fl *fastLimit
	// state is reqQueued until the batcher sends r (reqSent) or its caller
	// gives up first (reqAbandoned: the batcher drops it unsent).
	state atomic.Int32
	// sticky requests (refunds) are sent even when their caller gives up.
	sticky bool
	// linger: a late refund (newLateRefund), waited for by settleLate in
	// the background. Its call lingers like one with ops to undo if
	// unknown, and its outcome is its reply's, however late within the
	// store's late wait: a reply merely slow (a loaded host, a held reply)
	// is not a failed refund.
	linger bool
	// unknown[k] says op k has sluice.Op.UndoIfUnknown (a Take of cost > 0):
	// if its call times out and a late reply says it was charged, it is
	// refunded (see settleLate, newLateRefund). Nil when no op has it, and
	// when the store has no late wait.
	unknown []bool

	// Filled in by the batcher before done is closed.
	nowOut int64
	res    []int64  // 5 per op
	undo   []string // modeUndo: (op, old, new) triples
	err    error
	done   chan struct{}

	// nat is the native group (native.go), nil on the script path.
	nat *nativeGroup

	// Backing arrays for a one-op group.
	key1 [1]string
	arg1 [3 + opFields]string
	res1 [5]int64
	unk1 [1]bool
}

func (r *request) n() int { return len(r.keys) }

func (r *request) op(k int) int {
	if r.idx == nil {
		return k
	}
	return r.idx[k]
}

// newRequest builds the group of ops[idx] (all ops when idx is nil).
func (s *Store) newRequest(ops []sluice.Op, idx []int, now, mode string) *request {
	n := len(ops)
	if idx != nil {
		n = len(idx)
	}
	r := &request{mode: mode, now: now, idx: idx, done: make(chan struct{})}
	if n == 1 { // the common case, in one allocation
		r.keys, r.args = r.key1[:], r.arg1[:3]
	} else {
		r.keys, r.args = make([]string, n), make([]string, 3, 3+n*opFields)
	}
	r.args[0], r.args[1], r.args[2] = strconv.Itoa(n), mode, now
	actions := false
	for k := range n {
		op := &ops[r.op(k)]
		actions = actions || op.Action != sluice.Take
		if op.UndoIfUnknown && op.Action == sluice.Take && !op.Release && op.Cost > 0 && lateRefundable(op.Limit.Algorithm) && !stack.Paired(op) {
			if r.unknown == nil {
				r.unknown = r.unk1[:]
				if n > 1 {
					r.unknown = make([]bool, n)
				}
			}
			r.unknown[k] = true
		}
		r.algs |= 1 << op.Limit.Algorithm
		r.keys[k] = redisKey(s.prefix, op.Limit.Algorithm, op.Key)
		cost := strconv.FormatInt(op.Cost, 10)
		lease := ""
		switch {
		case stack.Paired(op):
			if op.Release {
				cost = "r" // a void
			}
			lease = "p" + strconv.FormatUint(op.Lease, 10) + ":" + strconv.FormatInt(op.Reserve, 10) + ":" +
				strconv.FormatInt(op.SettleWithin.Microseconds(), 10) + ":" + pairKey(s.prefix, op.Limit.Algorithm, op.Key, op.Lease)
		case op.Release:
			cost, lease = "r", strconv.FormatUint(op.Lease, 10)
		case op.Action == sluice.Charge:
			cost = "+" + cost
		case op.Action == sluice.Refund:
			cost = "-" + cost
		case op.Action == sluice.Reset:
			cost = "x"
		case op.Limit.Algorithm == sluice.Concurrency && op.Cost > 0:
			if r.leases == nil {
				r.leases = make([]uint64, n)
			}
			r.leases[k] = op.Lease // chosen by the caller, else picked here
			if r.leases[k] == 0 {
				r.leases[k] = s.newLease()
			}
			lease = strconv.FormatUint(r.leases[k], 10)
		}
		r.args = append(r.args, limitSpec(op.Limit), cost, lease)
	}
	if n == 1 && mode == modeDecide {
		op := &ops[r.op(0)]
		r.one = op.Action == sluice.Take && !op.Release && op.Limit.Algorithm != sluice.SlidingLog && op.Limit.Algorithm != sluice.Concurrency && !stack.Paired(op)
		r.fast = r.one
		if r.fast {
			r.fl = fastLimitOf(op.Limit)
		}
	}
	if actions || s.lateWait <= 0 {
		// A group with actions is not settled late (the service never
		// mixes them with Takes); without a late wait nothing is.
		r.unknown = nil
	}
	return r
}

// newLateRefund builds the group that gives back what the flagged ops
// (r.unknown) of r, a group a late reply said was allowed, charged: a
// Refund of the same cost (never more than the key still holds, see
// sluice.Refund), or for a concurrency acquire the release of its lease;
// the other ops look. It carries no Take, so nothing in it can be denied,
// and it reads the clock the charge read (Redis TIME, or the given now).
func newLateRefund(r *request) *request {
	// At the charge's instant (the late reply's now), not the refund's: a
	// fixed window then gives back only into the window the charge was
	// counted in, never into a later one the key has rolled to since.
	now := strconv.FormatInt(r.nowOut, 10)
	f := &request{mode: modeDecide, now: now, idx: r.idx, keys: r.keys, algs: r.algs,
		done: make(chan struct{}), sticky: true, linger: true}
	f.args = append([]string(nil), r.args...)
	f.args[1], f.args[2] = modeDecide, now
	for k := range r.n() {
		spec, cost := 3+k*opFields, 3+k*opFields+1
		switch {
		case !r.unknown[k]:
			if f.args[cost] != "r" {
				f.args[cost] = "0" // a look
			}
		case strings.HasPrefix(f.args[spec], strconv.Itoa(int(sluice.Concurrency))+":"):
			f.args[cost] = "r" // release the lease the acquire took
		default:
			f.args[cost] = "-" + f.args[cost]
		}
	}
	return f
}

// lateRefundable reports whether a refund of a Take of algorithm a, sent
// at a later instant (a late reply's refund, newLateRefund), takes back that
// charge or less. Not for the sliding algorithms: a log's refund takes its
// newest entries, another admission's later than the charge, and a sliding
// window's takes from the current window a charge counted in the previous
// one; either could then admit more than the limit. Their charge stays
// (sluice.Op.UndoIfUnknown is a best effort): the limit admits less until
// it drains, never more.
func lateRefundable(a sluice.Algorithm) bool {
	return a != sluice.SlidingLog && a != sluice.SlidingWindow
}

// Request states.
const (
	reqQueued int32 = iota
	reqSent
	reqAbandoned
)

// newRefund builds the group that takes back what r (a modeUndo group that
// was allowed) charged, at the same instant.
func (s *Store) newRefund(r *request) *request {
	f := &request{mode: modeRefund, now: strconv.FormatInt(r.nowOut, 10), idx: r.idx,
		keys: r.keys, algs: r.algs, done: make(chan struct{}), sticky: true}
	f.args = make([]string, 0, len(r.args)+2+len(r.undo))
	f.args = append(f.args, r.args...)
	f.args[1], f.args[2] = modeRefund, f.now
	f.args = append(f.args, strconv.Itoa(len(r.undo)/3))
	f.args = append(f.args, r.undo...)
	clock := "" // the charge used the given now: so does the refund
	if r.now == "" {
		clock = "t" // the charge read Redis TIME: the refund reads it again
	}
	f.args = append(f.args, clock)
	return f
}

// wait blocks until r is decided or ctx is done. When ctx ends first, a
// request still queued is abandoned (never sent, nothing charged); one
// already sent may still be decided by Redis. Either way the error wraps
// ctx.Err() and is the caller's, not the store's.
func (r *request) wait(ctx context.Context) error {
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		if !r.sticky && r.state.CompareAndSwap(reqQueued, reqAbandoned) {
			return fmt.Errorf("redis: gave up while queued, nothing sent: %w", ctx.Err())
		}
		select {
		case <-r.done: // decided meanwhile
			return r.err
		default:
		}
		return fmt.Errorf("redis: gave up waiting for the reply (the script may still run): %w", ctx.Err())
	}
}

func (r *request) denied() bool {
	for k := range r.n() {
		if r.res[5*k] != 0 {
			return true
		}
	}
	return false
}

// charged reports whether the group holds a charge to refund.
func (r *request) charged(ops []sluice.Op) bool {
	for k := range r.n() {
		if op := &ops[r.op(k)]; (!op.Release && op.Cost > 0) || stack.Paired(op) {
			return true
		}
	}
	return false
}

// results stores the group's results. committed says whether the charges
// stand (then acquires get their lease). A refund group leaves the results
// of releases, decided by the charging group, as they are.
func (r *request) results(ops []sluice.Op, out []sluice.Result, committed bool) {
	for k := range r.n() {
		i := r.op(k)
		op := &ops[i]
		if r.mode == modeRefund && op.Release {
			continue
		}
		v := r.res[5*k : 5*k+5]
		res := sluice.Result{
			Allowed:    v[0] == 0,
			Reason:     sluice.Reason(v[0]),
			Limit:      stack.Capacity(op.Limit),
			Remaining:  v[1],
			ResetAfter: time.Duration(v[2]) * time.Microsecond,
			RetryAfter: time.Duration(v[3]) * time.Microsecond,
			Delay:      time.Duration(v[4]) * time.Microsecond,
			At:         r.nowOut,
		}
		if committed && res.Allowed && r.leases != nil && r.leases[k] != 0 {
			res.Lease = r.leases[k]
		}
		out[i] = res
	}
}

// batcher coalesces the groups bound for one batch target into script calls.
type batcher struct {
	s        *Store
	slot     int  // cluster slot, -1 for the single node
	native   bool // runs native calls (native.go)
	mu       sync.Mutex
	queue    []*request
	queued   int // ops in queue
	inflight int
}

// submit queues r; if a call may start, it starts one in a new goroutine.
func (b *batcher) submit(r *request) {
	b.mu.Lock()
	b.queue = append(b.queue, r)
	b.queued += r.n()
	b.startLocked()
}

// submitAll queues rs as submit queues each, under one lock, so that the
// call that starts (or the next) takes them together: a caller's many
// requests for one target (Allot's) travel in one script call, up to
// MaxBatch ops, rather than the first alone and the rest after it.
func (b *batcher) submitAll(rs []*request) {
	b.mu.Lock()
	for _, r := range rs {
		b.queue = append(b.queue, r)
		b.queued += r.n()
	}
	b.startLocked()
}

// startLocked starts a call with the queue when the in-flight rule allows
// one, and unlocks b.mu.
func (b *batcher) startLocked() {
	// A call starts at once when none is in flight; another only once a
	// quarter batch waits, so that calls stay large (Redis spends most of
	// its time per op, not per call, but the per-call part is not free).
	if b.inflight >= b.s.maxInFlight || (b.inflight > 0 && b.queued < b.s.maxBatch/4) {
		b.mu.Unlock()
		return // a call in flight takes the queue when it returns
	}
	batch := b.takeLocked()
	b.inflight++
	b.mu.Unlock()
	go b.run(batch)
}

// takeLocked removes up to MaxBatch ops' worth of groups (at least one)
// from the queue. Requires b.mu.
func (b *batcher) takeLocked() []*request {
	ops, k := 0, 0
	for k < len(b.queue) && (k == 0 || ops+b.queue[k].n() <= b.s.maxBatch) {
		ops += b.queue[k].n()
		k++
	}
	b.queued -= ops
	batch := make([]*request, k)
	copy(batch, b.queue)
	rest := copy(b.queue, b.queue[k:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	return batch
}

// run executes batches until the queue is empty.
func (b *batcher) run(batch []*request) {
	for {
		if b.native {
			b.s.execNative(b.slot, batch)
		} else {
			b.s.exec(b.slot, batch)
		}
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.inflight--
			b.mu.Unlock()
			return
		}
		batch = b.takeLocked()
		b.mu.Unlock()
	}
}

// exec runs one script call for batch, sent to the node owning slot, and
// completes its requests. Requests abandoned by their callers are dropped
// unsent.
func (s *Store) exec(slot int, batch []*request) {
	live := batch[:0]
	for _, r := range batch {
		if r.sticky || r.state.CompareAndSwap(reqQueued, reqSent) {
			live = append(live, r)
		}
	}
	batch = live
	if len(batch) == 0 {
		return
	}
	n := s.nodeFor(slot)
	report, err := n.allow()
	if err != nil {
		for _, r := range batch {
			r.err = err
			close(r.done)
		}
		return
	}
	nkeys, nargs, allots := 0, 2, 0
	var algs algMask
	fast, one := true, true
	for _, r := range batch {
		algs |= r.algs
		nkeys += r.n()
		nargs += len(r.args)
		if r.mode == modeAllot {
			allots += r.n()
		}
		fast = fast && r.fast
		one = one && r.one
	}
	kind := kindDriver
	switch {
	case fast:
		kind = kindFast
	case one:
		kind = kindOne
	}
	keys := make([]string, 0, nkeys)
	var args []string
	switch kind {
	case kindFast:
		// scripts/fast.lua: minTTL, deadline (below), dup, then runs of
		// ops of one limit, cost and now: count, quota, window, cost, now,
		// algorithm, burst, interval.
		args = make([]string, 3, 8)
	case kindOne:
		// scripts/one.lua: minTTL, deadline (below), dup, then per op
		// limit, cost and now.
		args = make([]string, 3, 3+3*len(batch))
	default:
		args = make([]string, 0, nargs+2)
		args = append(args, s.minTTL, s.channel, strconv.Itoa(len(batch)))
	}
	if kind != kindDriver {
		args[0] = s.minTTL
		if mayRepeat(batch) {
			args[2] = "1"
		}
	}
	sticky, unknown, linger := false, false, false
	run, count := 0, 0
	for k, r := range batch {
		keys = append(keys, r.keys...)
		switch {
		case kind == kindDriver:
			args = append(args, r.args...)
		case kind == kindOne:
			args = append(args, r.args[3], r.args[4], r.args[2])
		case k == 0 || !sameRun(batch[k-1], r):
			if count > 0 {
				args[run] = strconv.Itoa(count)
			}
			run, count = len(args), 1
			a := &r.fl.args
			args = append(args, "", a[0], a[1], r.args[4], r.args[2], a[2], a[3], a[4])
		default:
			count++
		}
		sticky = sticky || r.sticky
		unknown = unknown || r.unknown != nil
		linger = linger || r.linger
	}
	var script *rueidis.Lua
	switch kind {
	case kindFast:
		args[run] = strconv.Itoa(count)
		script = s.fast
	case kindOne:
		script = s.oneScript(algs)
	default:
		script = s.script(algs)
	}
	s.calls.Add(1)
	s.groups.Add(uint64(len(batch)))
	s.opsDecided.Add(uint64(nkeys - allots))
	s.allots.Add(uint64(allots))
	// The timeout starts here, where the call is handed to the client: time
	// queued before is backpressure, not a sign the node is down.
	start := time.Now()
	// The deadline in the node's clock (scripts/guard.lua): a call that
	// runs too late to answer in time does nothing. Refunds have none (late
	// is better than never), nor have calls under a test clock.
	deadline := ""
	if s.now == nil && !sticky {
		if dl, ok := n.clock.deadline(start, s.timeout); ok {
			deadline = strconv.FormatInt(dl, 10)
		}
	}
	if kind != kindDriver {
		args[1] = deadline
	} else {
		args = append(args, "g:"+deadline)
	}
	var (
		vals []rueidis.RedisMessage
		late <-chan rueidis.RedisResult
	)
	// A call with late refunds lingers too (see request.linger).
	if (unknown || linger) && s.lateWait > 0 {
		vals, late, err = s.execLingering(script, keys, args)
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		vals, err = replyValues(script.Exec(ctx, s.client, keys, args))
		cancel()
	}
	took := time.Since(start)
	if err == nil {
		if perr := parseReply(vals, batch, kind); perr != nil {
			err = &replyError{perr}
		} else if s.now == nil && !sticky { // a refund reports the charge's now
			n.clock.sample(batch[0].nowOut, start, took)
		}
	}
	closed := s.closed.Load()
	outcome := classify(err, closed)
	report(outcome, err)
	if s.callHook != nil {
		s.callHook(took, outcome)
	}
	if err != nil {
		what := fmt.Sprintf("redis: script call (%d groups, %d ops) to %s", len(batch), nkeys, n.name())
		err = s.callError(what, err, outcome, closed)
		for _, r := range batch {
			r.err = err
		}
	}
	for _, r := range batch {
		if late != nil && r.linger {
			continue // settled by the late reply (settleLate)
		}
		close(r.done)
	}
	if late != nil {
		go s.settleLate(slot, batch, late, kind)
	}
}

// replyValues reads a script call's reply: its values, or its error
// (errExpired when scripts/guard.lua refused to run it).
func replyValues(reply rueidis.RedisResult) ([]rueidis.RedisMessage, error) {
	vals, err := reply.ToArray()
	if err != nil {
		if str, serr := reply.ToString(); serr == nil && str == expiredReply {
			err = errExpired
		}
	}
	return vals, err
}

// execLingering sends a script call that carries groups to undo if unknown.
// Its Takes wait for the reply s.timeout, exactly as for any call; but when
// none comes in time, the call is not given up: it goes on waiting, up to
// s.lateWait more, and the returned channel gets its reply (or its error).
func (s *Store) execLingering(script *rueidis.Lua, keys, args []string) ([]rueidis.RedisMessage, <-chan rueidis.RedisResult, error) {
	reply, late := lingering(s.timeout, s.lateWait, func(ctx context.Context) rueidis.RedisResult {
		return script.Exec(ctx, s.client, keys, args)
	})
	if late != nil {
		// As a call under a context that timed out would fail.
		return nil, late, context.DeadlineExceeded
	}
	vals, err := replyValues(reply)
	return vals, nil, err
}

// lingering runs call under a context of timeout + late and waits for it
// timeout: its result, if it came in time; else a channel that gets the
// result when it comes (within late more), for the caller to settle.
func lingering[T any](timeout, late time.Duration, call func(context.Context) T) (T, <-chan T) {
	ch := make(chan T, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout+late)
		defer cancel()
		ch <- call(ctx)
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case v := <-ch:
		return v, nil
	case <-t.C:
		var zero T
		return zero, ch
	}
}

// settleLate waits for the late reply of a call whose Takes already failed
// with sluice.ErrStoreTimeout. For each group the reply says was allowed
// (charged) and that has ops to undo if unknown, it sends a sticky refund of
// those ops to the same batch target (slot) and waits for its reply, within
// the store's late wait (the refund's call lingers like this one). It
// completes the late refunds the call itself carried (request.linger). It
// never touches the requests it was given, which their
// callers may still read: it decodes the reply into copies. It counts in
// Stats: LateCharged, LateRefunded, RefundFailures, LateUnknown, LateExpired.
func (s *Store) settleLate(slot int, batch []*request, late <-chan rueidis.RedisResult, kind callKind) {
	vals, err := replyValues(<-late)
	groups := make([]*request, len(batch))
	for k, r := range batch {
		groups[k] = &request{mode: r.mode, now: r.now, idx: r.idx, keys: r.keys, args: r.args,
			leases: r.leases, algs: r.algs, unknown: r.unknown,
			one: r.one, fast: r.fast, fl: r.fl}
	}
	if err == nil {
		if perr := parseReply(vals, groups, kind); perr != nil {
			err = &replyError{perr}
		}
	}
	// Late refunds in the call were left waiting by exec: their outcome is
	// the late reply's (a call with refunds carries no deadline guard).
	unknown := false
	for k, r := range batch {
		unknown = unknown || r.unknown != nil
		if r.linger {
			r.nowOut, r.res, r.undo = groups[k].nowOut, groups[k].res, groups[k].undo
			if err != nil {
				r.err = fmt.Errorf("redis: late refund: %w", err)
			} else {
				r.err = nil
			}
			close(r.done)
		}
	}
	if errors.Is(err, errExpired) {
		if unknown {
			s.lateExpired.Add(1) // it reached Redis too late and did nothing
		}
		return
	}
	if err != nil {
		if unknown {
			s.lateUnknown.Add(1) // no reply even now: the outcome stays unknown
		}
		return
	}
	b := &s.one
	if slot >= 0 {
		b = s.slotBatcher(slot)
	}
	var refunds []*request
	for _, g := range groups {
		if g.unknown != nil && !g.denied() {
			s.lateCharged.Add(1)
			f := newLateRefund(g)
			refunds = append(refunds, f)
			b.submit(f)
		}
	}
	for _, f := range refunds {
		if <-f.done; f.err != nil {
			s.refundFailures.Add(1)
		} else {
			s.lateRefunded.Add(1)
		}
	}
}

// parseReply distributes the script's reply over the groups: per group a
// string of packed little-endian doubles (now, then 5 per op), and for a
// modeUndo group the undo count and triples. The replies of the other
// drivers (kind) are read by parseFast and parseOne.
func parseReply(vals []rueidis.RedisMessage, batch []*request, kind callKind) error {
	switch kind {
	case kindFast:
		return parseFast(vals, batch)
	case kindOne:
		return parseOne(vals, batch)
	}
	pos := 0
	for _, r := range batch {
		if pos >= len(vals) {
			return errors.New("reply: too short")
		}
		packed, err := vals[pos].ToString()
		pos++
		if err != nil {
			return fmt.Errorf("reply: %w", err)
		}
		if len(packed) != 8*(1+5*r.n()) {
			return fmt.Errorf("reply: %d bytes for %d ops, want %d", len(packed), r.n(), 8*(1+5*r.n()))
		}
		r.nowOut = unpackInt(packed, 0)
		if r.n() == 1 {
			r.res = r.res1[:]
		} else {
			r.res = make([]int64, 5*r.n())
		}
		for i := range r.res {
			r.res[i] = unpackInt(packed, i+1)
		}
		if r.mode != modeUndo {
			continue
		}
		if pos >= len(vals) {
			return errors.New("reply: no undo count")
		}
		k, err := vals[pos].AsInt64()
		pos++
		if err != nil || k < 0 || pos+3*int(k) > len(vals) {
			return fmt.Errorf("reply: bad undo count %d: %v", k, err)
		}
		r.undo = make([]string, 3*k)
		for i := range r.undo {
			if vals[pos].IsNil() {
				r.undo[i] = ""
			} else if r.undo[i], err = vals[pos].ToString(); err != nil {
				if v, ierr := vals[pos].AsInt64(); ierr == nil {
					r.undo[i] = strconv.FormatInt(v, 10)
				} else {
					return fmt.Errorf("reply: undo: %w", err)
				}
			}
			pos++
		}
	}
	if pos != len(vals) {
		return fmt.Errorf("reply has %d values, want %d", len(vals), pos)
	}
	return nil
}

// callKind is which script a call runs.
type callKind int

const (
	// kindDriver: the general driver (lib.lua, the algorithms' files,
	// guard.lua, driver.lua), for any batch.
	kindDriver callKind = iota
	// kindFast: scripts/fast.lua, for a batch of one-op Takes on bucket
	// and window keys (request.fast).
	kindFast
	// kindOne: scripts/one.lua after lib.lua, the algorithms' files and
	// allot.lua, for a batch of such Takes and one-op allotments
	// (request.one) that holds an allotment.
	kindOne
)

// parseOne distributes the reply of scripts/one.lua over its groups, one
// op each: one string of 6 packed doubles per op.
func parseOne(vals []rueidis.RedisMessage, batch []*request) error {
	if len(vals) != 1 {
		return fmt.Errorf("reply has %d values, want 1", len(vals))
	}
	packed, err := vals[0].ToString()
	if err != nil {
		return fmt.Errorf("reply: %w", err)
	}
	if len(packed) != 8*6*len(batch) {
		return fmt.Errorf("reply: %d bytes for %d ops, want %d", len(packed), len(batch), 8*6*len(batch))
	}
	for k, r := range batch {
		r.nowOut = unpackInt(packed, 6*k)
		r.res = r.res1[:]
		for i := range r.res {
			r.res[i] = unpackInt(packed, 6*k+1+i)
		}
	}
	return nil
}

// fastLimit is a limit as scripts/fast.lua reads it: its parameters, and
// in decimal (args) its quota, window (µs), algorithm letter ("f"
// fixed_window, "s" sliding_window, "g" gcra, "l" leaky_bucket, "t"
// token_bucket), burst and interval (µs).
type fastLimit struct {
	alg  sluice.Algorithm
	p    algorithm.Params
	args [5]string
}

// fastLimitOf returns the fastLimit of l (a bucket or window limit), one
// per limit.
var fastLimitOf = func() func(sluice.Limit) *fastLimit {
	var m cow.Map[sluice.Limit, *fastLimit]
	return func(l sluice.Limit) *fastLimit {
		if v, ok := m.Get(l); ok {
			return v
		}
		p := stack.Params(l)
		v := &fastLimit{alg: l.Algorithm, p: p, args: [5]string{strconv.FormatInt(p.Quota, 10), strconv.FormatInt(p.Window, 10),
			algLetter[l.Algorithm], strconv.FormatInt(p.Burst, 10), strconv.FormatInt(p.Interval, 10)}}
		m.Put(l, v)
		return v
	}
}()

// mayRepeat reports whether a key comes more than once in a batch of
// one-op groups.
func mayRepeat(batch []*request) bool {
	if len(batch) <= 16 {
		for i := 1; i < len(batch); i++ {
			for j := range i {
				if batch[i].keys[0] == batch[j].keys[0] {
					return true
				}
			}
		}
		return false
	}
	seen := make(map[string]struct{}, len(batch))
	for _, r := range batch {
		if _, ok := seen[r.keys[0]]; ok {
			return true
		}
		seen[r.keys[0]] = struct{}{}
	}
	return false
}

// sameRun reports whether fast groups a and b share limit, cost and now,
// so that they travel in one run of scripts/fast.lua's arguments.
func sameRun(a, b *request) bool {
	return a.fl == b.fl && a.args[4] == b.args[4] && a.args[2] == b.args[2]
}

// compactMark starts a full record in the fast driver's reply; stateMark
// a sliding window's state before its op.
const (
	compactMark = -1
	stateMark   = -2
)

// parseFast distributes the fast driver's reply (scripts/fast.lua) over
// its groups, one Take each, grouped in runs as exec sent them: integers,
// per run its now, then per op a compact code, a full record, or the state
// before the op, whose figures the algorithm gives (algorithm.SlidingWindow
// for a sliding window's denial; for a bucket, always).
func parseFast(vals []rueidis.RedisMessage, batch []*request) error {
	pos := 0
	next := func() (int64, error) {
		if pos >= len(vals) {
			return 0, errors.New("reply: too short")
		}
		pos++
		v, err := vals[pos-1].AsInt64()
		if err != nil {
			return 0, fmt.Errorf("reply: %w", err)
		}
		return v, nil
	}
	var now, stop int64
	for k, r := range batch {
		var err error
		if k == 0 || !sameRun(batch[k-1], r) {
			if now, err = next(); err != nil {
				return err
			}
			w := r.fl.p.Window
			if w <= 0 {
				return fmt.Errorf("reply: group without a window (%d)", w)
			}
			stop = (algorithm.FloorDiv(now, w)+1)*w - now
		}
		r.nowOut = now
		r.res = r.res1[:]
		switch r.fl.alg {
		case sluice.FixedWindow:
			err = parseFixed(r, stop, next)
		case sluice.SlidingWindow:
			err = parseSlide(r, now, stop, next)
		default:
			err = parseBucket(r, now, next)
		}
		if err != nil {
			return err
		}
	}
	if pos != len(vals) {
		return fmt.Errorf("reply: %d values, want %d", len(vals), pos)
	}
	return nil
}

// parseFixed decodes a fixed window's part of the fast driver's reply
// (next) into r.res; stop is the time from now to the end of now's window.
func parseFixed(r *request, stop int64, next func() (int64, error)) error {
	code, err := next()
	if err != nil {
		return err
	}
	if code == compactMark {
		for i := range 4 {
			if r.res[i], err = next(); err != nil {
				return err
			}
		}
		r.res[4] = 0
		return nil
	}
	reason, held := (code>>1)&3, code&1
	r.res[0], r.res[1], r.res[2], r.res[3], r.res[4] = reason, code>>3, 0, 0, 0
	if held == 1 {
		r.res[2] = stop
	}
	if reason == int64(sluice.ReasonLimited) {
		r.res[3] = stop
	}
	return nil
}

// parseSlide is parseFixed for a sliding window.
func parseSlide(r *request, now, stop int64, next func() (int64, error)) error {
	code, err := next()
	if err != nil {
		return err
	}
	if code != stateMark {
		held := code & 3
		r.res[0], r.res[1], r.res[2], r.res[3], r.res[4] = (code>>2)&3, code>>4, 0, 0, 0
		switch held {
		case 2:
			r.res[2] = stop + r.fl.p.Window
		case 1:
			r.res[2] = stop
		}
		return nil
	}
	var st [3]int64
	for i := range st {
		if st[i], err = next(); err != nil {
			return err
		}
	}
	cost, err := strconv.ParseInt(r.args[4], 10, 64)
	if err != nil {
		return fmt.Errorf("reply: cost %q: %w", r.args[4], err)
	}
	_, d := algorithm.SlidingWindow(algorithm.WindowState{ID: st[0], Cur: st[1], Prev: st[2]}, now, cost, r.fl.p)
	resultOf(r.res, d)
	return nil
}

// parseBucket decodes a bucket's part of the fast driver's reply, its
// state before the op (a TAT; token_bucket: missing and last), into r.res:
// the algorithm's decision on it, which the script made with the same
// arithmetic.
func parseBucket(r *request, now int64, next func() (int64, error)) error {
	tat, err := next()
	if err != nil {
		return err
	}
	cost, err := strconv.ParseInt(r.args[4], 10, 64)
	if err != nil {
		return fmt.Errorf("reply: cost %q: %w", r.args[4], err)
	}
	var d algorithm.Decision
	switch r.fl.alg {
	case sluice.GCRA:
		_, d = algorithm.GCRA(tat, now, cost, r.fl.p)
	case sluice.LeakyBucket:
		_, d = algorithm.LeakyBucket(tat, now, cost, r.fl.p)
	case sluice.TokenBucket:
		last, err := next()
		if err != nil {
			return err
		}
		_, d = algorithm.TokenBucket(algorithm.TokenState{Missing: tat, Last: last}, now, cost, r.fl.p)
	default:
		return fmt.Errorf("reply: %v is not decided by the fast driver", r.fl.alg)
	}
	resultOf(r.res, d)
	return nil
}

// unpackInt reads the i-th little-endian double of b as an integer (the
// script packs only integers below 2^53, which doubles hold exactly).
func unpackInt(b string, i int) int64 {
	b = b[8*i : 8*i+8]
	bits := uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
	return int64(math.Float64frombits(bits))
}
