package memory

import (
	"sync"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/algorithm"
	"github.com/sluice-rl/sluice/store/stack"
)

// Per-key state, one table per algorithm so each value is as small as its
// algorithm needs. exp is when the key is back in its fresh state (then it
// can be dropped without changing any decision).
type (
	// tatState is the state of gcra and leaky_bucket, and of token_bucket
	// too: a bucket's (missing tokens, last refill) is encoded losslessly as
	// the instant it is full again, Last + Missing × Interval, which is also
	// when the key is fresh (exp). One int64 instead of three keeps the
	// table small enough to stay in cache.
	tatState    struct{ tat int64 }
	windowState struct {
		s   algorithm.WindowState
		exp int64
	}
	logState struct {
		log []algorithm.Entry
		exp int64
	}
)

// memo remembers the last limits seen by a shard with their derived params,
// so the hot path neither re-validates nor divides.
type memo struct {
	limit  sluice.Limit
	params algorithm.Params
}

type shard struct {
	mu    sync.Mutex
	gcra  table[tatState]
	leaky table[tatState]
	token table[tatState]
	fixed table[windowState]
	slide table[windowState]
	slog  table[*logState]
	conc  table[*logState]
	// pairs holds the records of reservations (sluice.Op.Lease on other
	// algorithms), by counter key and lease; swept when expired, not
	// counted in count or under MaxKeys.
	pairs map[pairKey]algorithm.Pair
	count int
	// minExp is at most the earliest exp of the shard's keys (so no key is
	// fresh before it); lastSweep is when sweepShard last ran, sinceSweep
	// the keys inserted since. See cap.go.
	minExp, lastSweep int64
	sinceSweep        int
	memos             [4]memo
	next              int
	_                 [64]byte // keep neighbouring shards' locks off this cache line
}

// params returns the algorithm params of l, validating it the first time the
// shard sees it. Requires sh.mu.
func (sh *shard) params(l *sluice.Limit) (algorithm.Params, error) {
	for i := range sh.memos {
		if sh.memos[i].limit == *l {
			return sh.memos[i].params, nil
		}
	}
	op := sluice.Op{Limit: *l}
	if err := stack.CheckOp(&op); err != nil {
		return algorithm.Params{}, err
	}
	p := stack.Params(*l)
	sh.memos[sh.next] = memo{limit: *l, params: p}
	sh.next = (sh.next + 1) % len(sh.memos)
	return p, nil
}

// undo records how to take back one charge (or charge, refund or reset) of
// a batch.
type undo struct {
	sh    *shard
	alg   sluice.Algorithm
	h     uint64
	key   string
	isNew bool
	tat   tatState
	win   windowState
	entry algorithm.Entry // the log entry that was added
	// snap, when set, is the whole log state before the op (a refund or
	// reset of a log key), put back as it was.
	snap *logState
	// pair, when set, says this undo puts back the record pk of a
	// reservation: pold, or none when !pfound.
	pair   bool
	pfound bool
	pk     pairKey
	pold   algorithm.Pair
}

// pairKey names the record of a reservation: its counter and lease.
type pairKey struct {
	key   string
	lease uint64
}

func (u *undo) revert(s *store) {
	sh := u.sh
	if u.pair {
		if u.pfound {
			sh.pairs[u.pk] = u.pold
		} else {
			delete(sh.pairs, u.pk)
		}
		return
	}
	if u.snap != nil {
		t := &sh.slog
		if u.alg == sluice.Concurrency {
			t = &sh.conc
		}
		restore(s, sh, t, u, u.snap)
		sh.note(u.snap.exp)
		return
	}
	switch u.alg {
	case sluice.GCRA:
		restore(s, sh, &sh.gcra, u, u.tat)
		sh.note(u.tat.tat)
	case sluice.LeakyBucket:
		restore(s, sh, &sh.leaky, u, u.tat)
		sh.note(u.tat.tat)
	case sluice.TokenBucket:
		restore(s, sh, &sh.token, u, u.tat)
		sh.note(u.tat.tat)
	case sluice.FixedWindow:
		restore(s, sh, &sh.fixed, u, u.win)
		sh.note(u.win.exp)
	case sluice.SlidingWindow:
		restore(s, sh, &sh.slide, u, u.win)
		sh.note(u.win.exp)
	case sluice.SlidingLog:
		unadd(s, sh, &sh.slog, u)
	case sluice.Concurrency:
		unadd(s, sh, &sh.conc, u)
	}
}

func restore[V any](s *store, sh *shard, t *table[V], u *undo, old V) {
	i, found := t.find(u.h, u.key)
	switch {
	case u.isNew:
		if found {
			t.deleteAt(s.seed, i)
			sh.count--
		}
	case found:
		t.slots[i].v = old
	default: // the batch deleted it (a reset, or a refund back to fresh)
		t.insert(s.seed, u.h, cloneKey(u.key), old)
		sh.count++
	}
}

// unadd takes back an entry that algorithm.SlidingLog or Concurrency added or
// merged. The key's exp is left as is: later, never earlier, than needed.
func unadd(s *store, sh *shard, t *table[*logState], u *undo) {
	i, found := t.find(u.h, u.key)
	if !found {
		return
	}
	ls := t.slots[i].v
	for j := len(ls.log) - 1; j >= 0; j-- {
		if ls.log[j].At == u.entry.At && ls.log[j].ID == u.entry.ID {
			ls.log[j].N -= u.entry.N
			if ls.log[j].N <= 0 {
				ls.log = append(ls.log[:j], ls.log[j+1:]...)
			}
			break
		}
	}
	if u.isNew && len(ls.log) == 0 {
		t.deleteAt(s.seed, i)
		sh.count--
	}
}

// put stores v for key: in place when the key was found at slot i, else as a
// new key (making room first if the shard is at its cap).
func put[V any](s *store, sh *shard, t *table[V], h uint64, key string, i int, found bool, v V, now int64) {
	if found {
		t.slots[i].v = v
		return
	}
	s.admit(sh, now)
	t.insert(s.seed, h, cloneKey(key), v)
}

// apply performs one op, whose key hashes to h, on its shard and writes its
// Result to out. When undos is non-nil (a batch), every committed charge is
// recorded there. Requires sh.mu. Each algorithm family has its own method,
// so the hot single-op path carries only the locals its algorithm needs.
func (s *store) apply(sh *shard, op *sluice.Op, h uint64, now int64, undos *[]undo, out *sluice.Result) error {
	p, err := sh.params(&op.Limit)
	if err != nil {
		return err
	}
	if stack.Paired(op) {
		return s.applyPaired(sh, op, h, now, undos, out)
	}
	var d algorithm.Decision
	var lease uint64
	switch alg := op.Limit.Algorithm; {
	case op.Action != sluice.Take:
		d = s.applyAction(sh, op, h, now, p, undos)
	case alg == sluice.GCRA, alg == sluice.LeakyBucket:
		d = s.applyTAT(sh, alg, op.Key, op.Cost, h, now, p, undos)
	case alg == sluice.TokenBucket:
		d = s.applyToken(sh, op.Key, op.Cost, h, now, p, undos)
	case alg == sluice.FixedWindow, alg == sluice.SlidingWindow:
		d = s.applyWindow(sh, alg, op.Key, op.Cost, h, now, p, undos)
	default:
		d, lease = s.applyLog(sh, op, h, now, p, undos)
	}
	writeResult(out, d, lease, now)
	return nil
}

// writeResult fills out with decision d (µs) taken at now.
func writeResult(out *sluice.Result, d algorithm.Decision, lease uint64, now int64) {
	out.Allowed = d.Reason == algorithm.Allowed
	out.Reason = sluice.Reason(d.Reason)
	out.Limit = d.Limit
	out.Remaining = d.Remaining
	out.ResetAfter = time.Duration(d.ResetAfter) * time.Microsecond
	out.RetryAfter = time.Duration(d.RetryAfter) * time.Microsecond
	out.Delay = time.Duration(d.Delay) * time.Microsecond
	out.Lease = lease
	out.At = now
}

func (s *store) applyTAT(sh *shard, alg sluice.Algorithm, key string, cost int64, h uint64, now int64, p algorithm.Params, undos *[]undo) algorithm.Decision {
	t := s.tatTable(sh, alg)
	i, found, old := t.get(h, key)
	var tat int64
	var d algorithm.Decision
	if alg == sluice.GCRA {
		tat, d = algorithm.GCRA(old.tat, now, cost, p)
	} else {
		tat, d = algorithm.LeakyBucket(old.tat, now, cost, p)
	}
	if d.OK() && cost > 0 {
		put(s, sh, t, h, key, i, found, tatState{tat}, now)
		sh.note(tat)
		if undos != nil {
			*undos = append(*undos, undo{sh: sh, alg: alg, h: h, key: key, isNew: !found, tat: old})
		}
	}
	return d
}

func (s *store) applyToken(sh *shard, key string, cost int64, h uint64, now int64, p algorithm.Params, undos *[]undo) algorithm.Decision {
	t := &sh.token
	i, found, old := t.get(h, key)
	ns, d := algorithm.TokenBucket(algorithm.TokenState{Last: old.tat}, now, cost, p)
	if d.OK() && cost > 0 {
		exp := ns.Last + ns.Missing*p.Interval
		put(s, sh, t, h, key, i, found, tatState{exp}, now)
		sh.note(exp)
		if undos != nil {
			*undos = append(*undos, undo{sh: sh, alg: sluice.TokenBucket, h: h, key: key, isNew: !found, tat: old})
		}
	}
	return d
}

func (s *store) applyWindow(sh *shard, alg sluice.Algorithm, key string, cost int64, h uint64, now int64, p algorithm.Params, undos *[]undo) algorithm.Decision {
	t := sh.windowTable(alg)
	i, found, old := t.get(h, key)
	var ns algorithm.WindowState
	var d algorithm.Decision
	if alg == sluice.FixedWindow {
		ns, d = algorithm.FixedWindow(old.s, now, cost, p)
	} else {
		ns, d = algorithm.SlidingWindow(old.s, now, cost, p)
	}
	if d.OK() && cost > 0 {
		put(s, sh, t, h, key, i, found, windowState{s: ns, exp: now + d.ResetAfter}, now)
		sh.note(now + d.ResetAfter)
		if undos != nil {
			*undos = append(*undos, undo{sh: sh, alg: alg, h: h, key: key, isNew: !found, win: old})
		}
	}
	return d
}

func (s *store) applyLog(sh *shard, op *sluice.Op, h uint64, now int64, p algorithm.Params, undos *[]undo) (algorithm.Decision, uint64) {
	alg, cost := op.Limit.Algorithm, op.Cost
	t := &sh.slog
	if alg == sluice.Concurrency {
		t = &sh.conc
	}
	i, found, st := t.get(h, op.Key)
	var log []algorithm.Entry
	if found {
		log = st.log
	}
	var d algorithm.Decision
	var entry algorithm.Entry
	var lease uint64
	switch {
	case op.Release:
		log, d = algorithm.Release(log, now, op.Lease, p)
	case alg == sluice.Concurrency && cost > 0 && algorithm.Held(log, now, op.Lease):
		// A chosen lease still held: a retried acquire, admitted as a look.
		log, d = algorithm.Concurrency(log, now, 0, 0, p)
		if found {
			st.log, st.exp = log, now+d.ResetAfter
			sh.note(st.exp)
		}
		return d, op.Lease
	case alg == sluice.Concurrency:
		if cost > 0 {
			lease = op.Lease // chosen by the caller, else picked here
			if lease == 0 {
				lease = s.lease.Add(1)
			}
			entry = algorithm.Entry{At: now + p.Window, N: cost, ID: lease}
		}
		log, d = algorithm.Concurrency(log, now, cost, lease, p)
	default:
		entry = algorithm.Entry{At: now, N: cost}
		log, d = algorithm.SlidingLog(log, now, cost, p)
	}
	if found {
		// Pruning and releases are kept even when denied: they change no
		// later decision (pruning) or are not charges (releases).
		st.log, st.exp = log, now+d.ResetAfter
		sh.note(st.exp)
	}
	if !d.OK() || cost == 0 || op.Release {
		return d, 0
	}
	if !found {
		put(s, sh, t, h, op.Key, i, false, &logState{log: log, exp: now + d.ResetAfter}, now)
		sh.note(now + d.ResetAfter)
	}
	if undos != nil {
		*undos = append(*undos, undo{sh: sh, alg: alg, h: h, key: op.Key, isNew: !found, entry: entry})
	}
	return d, lease
}

// applyPaired applies a reservation or its settle (stack.Paired) in one
// step under sh.mu: algorithm.PairStep says what the op does to its
// counter (a Take, Charge, Refund or look, applied as any such op), and
// algorithm.PairNext what its record becomes. A reservation denied by its
// own limit leaves a denied record that a batch's undo keeps; every other
// change of the record is undone with the batch.
func (s *store) applyPaired(sh *shard, op *sluice.Op, h uint64, now int64, undos *[]undo, out *sluice.Result) error {
	pk := pairKey{op.Key, op.Lease}
	old, found := sh.pairs[pk]
	if op.Release { // a void: a look, and a denied record if none
		inner := sluice.Op{Key: op.Key, Limit: op.Limit}
		if err := s.apply(sh, &inner, h, now, nil, out); err != nil {
			return err
		}
		if old.Exp <= now {
			if sh.pairs == nil {
				sh.pairs = make(map[pairKey]algorithm.Pair)
			}
			if !found {
				pk.key = cloneKey(pk.key)
			}
			sh.pairs[pk] = algorithm.Pair{Phase: algorithm.PairDenied, Exp: now + op.SettleWithin.Microseconds()}
		}
		return nil
	}
	var period int64 // a window's refund stays in its window (PairStep)
	if a := op.Limit.Algorithm; a == sluice.FixedWindow || a == sluice.SlidingWindow {
		period = op.Limit.Window.Microseconds()
	}
	act, n := algorithm.PairStep(old, now, op.Cost, op.Reserve, op.SettleWithin.Microseconds(), period)
	inner := *op
	inner.Lease, inner.Reserve, inner.SettleWithin, inner.Cost = 0, 0, 0, n
	switch act {
	case algorithm.PairCharge:
		inner.Action = sluice.Charge
	case algorithm.PairRefund:
		inner.Action = sluice.Refund
	}
	if err := s.apply(sh, &inner, h, now, undos, out); err != nil {
		return err
	}
	next, changed := algorithm.PairNext(old, now, op.SettleWithin.Microseconds(), act, n, out.Allowed)
	if !changed {
		return nil
	}
	if undos != nil && out.Allowed {
		*undos = append(*undos, undo{sh: sh, pair: true, pfound: found, pk: pk, pold: old})
	}
	if sh.pairs == nil {
		sh.pairs = make(map[pairKey]algorithm.Pair)
	}
	if !found {
		pk.key = cloneKey(pk.key)
	}
	sh.pairs[pk] = next
	return nil
}
