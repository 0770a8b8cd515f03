package memory

import (
	"sync"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/algorithm"
)

// Per-key state, one map per algorithm so each value is as small as its
// algorithm needs. exp is when the key is back in its fresh state (then it
// can be dropped without changing any decision).
type (
	tatState   struct{ tat int64 } // gcra, leaky_bucket: exp is tat itself
	tokenState struct {
		s   algorithm.TokenState
		exp int64
	}
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
	gcra  map[string]*tatState
	leaky map[string]*tatState
	token map[string]*tokenState
	fixed map[string]*windowState
	slide map[string]*windowState
	slog  map[string]*logState
	conc  map[string]*logState
	count int
	memos [4]memo
	next  int
	_     [64]byte // keep neighbouring shards' locks off this cache line
}

func (sh *shard) init() {
	sh.gcra = map[string]*tatState{}
	sh.leaky = map[string]*tatState{}
	sh.token = map[string]*tokenState{}
	sh.fixed = map[string]*windowState{}
	sh.slide = map[string]*windowState{}
	sh.slog = map[string]*logState{}
	sh.conc = map[string]*logState{}
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
	if err := op.Check(); err != nil {
		return algorithm.Params{}, err
	}
	p := l.Params()
	sh.memos[sh.next] = memo{limit: *l, params: p}
	sh.next = (sh.next + 1) % len(sh.memos)
	return p, nil
}

// undo records how to take back one charge of a batch.
type undo struct {
	sh    *shard
	alg   sluice.Algorithm
	key   string
	isNew bool
	tat   tatState
	token tokenState
	win   windowState
	entry algorithm.Entry // the log entry that was added
}

func (u *undo) revert() {
	sh := u.sh
	if u.isNew {
		sh.remove(u.alg, u.key)
		return
	}
	switch u.alg {
	case sluice.GCRA:
		*sh.gcra[u.key] = u.tat
	case sluice.LeakyBucket:
		*sh.leaky[u.key] = u.tat
	case sluice.TokenBucket:
		*sh.token[u.key] = u.token
	case sluice.FixedWindow:
		*sh.fixed[u.key] = u.win
	case sluice.SlidingWindow:
		*sh.slide[u.key] = u.win
	case sluice.SlidingLog:
		sh.slog[u.key].log = unadd(sh.slog[u.key].log, u.entry)
	case sluice.Concurrency:
		sh.conc[u.key].log = unadd(sh.conc[u.key].log, u.entry)
	}
}

// unadd takes back an entry that algorithm.SlidingLog or Concurrency added or
// merged. The key's exp is left as is: later, never earlier, than needed.
func unadd(log []algorithm.Entry, e algorithm.Entry) []algorithm.Entry {
	for i := len(log) - 1; i >= 0; i-- {
		if log[i].At == e.At && log[i].ID == e.ID {
			log[i].N -= e.N
			if log[i].N <= 0 {
				log = append(log[:i], log[i+1:]...)
			}
			break
		}
	}
	return log
}

func (sh *shard) remove(alg sluice.Algorithm, key string) {
	switch alg {
	case sluice.GCRA:
		delete(sh.gcra, key)
	case sluice.LeakyBucket:
		delete(sh.leaky, key)
	case sluice.TokenBucket:
		delete(sh.token, key)
	case sluice.FixedWindow:
		delete(sh.fixed, key)
	case sluice.SlidingWindow:
		delete(sh.slide, key)
	case sluice.SlidingLog:
		delete(sh.slog, key)
	case sluice.Concurrency:
		delete(sh.conc, key)
	}
	sh.count--
}

// apply performs one op on its shard. When undos is non-nil (a batch), every
// committed charge is recorded there. Requires sh.mu.
func (s *store) apply(sh *shard, op *sluice.Op, now int64, undos *[]undo, out *sluice.Result) error {
	p, err := sh.params(&op.Limit)
	if err != nil {
		return err
	}
	alg, cost := op.Limit.Algorithm, op.Cost
	var d algorithm.Decision
	var lease uint64
	switch alg {
	case sluice.GCRA, sluice.LeakyBucket:
		m := sh.gcra
		if alg == sluice.LeakyBucket {
			m = sh.leaky
		}
		st := m[op.Key]
		var old tatState
		if st != nil {
			old = *st
		}
		var tat int64
		if alg == sluice.GCRA {
			tat, d = algorithm.GCRA(old.tat, now, cost, p)
		} else {
			tat, d = algorithm.LeakyBucket(old.tat, now, cost, p)
		}
		if d.OK() && cost > 0 {
			isNew := st == nil
			if isNew {
				st = &tatState{}
				m[s.admit(sh, now, op.Key)] = st
			}
			st.tat = tat
			record(undos, undo{sh: sh, alg: alg, key: op.Key, isNew: isNew, tat: old})
		}
	case sluice.TokenBucket:
		st := sh.token[op.Key]
		var old tokenState
		if st != nil {
			old = *st
		}
		var ns algorithm.TokenState
		ns, d = algorithm.TokenBucket(old.s, now, cost, p)
		if d.OK() && cost > 0 {
			isNew := st == nil
			if isNew {
				st = &tokenState{}
				sh.token[s.admit(sh, now, op.Key)] = st
			}
			*st = tokenState{s: ns, exp: now + d.ResetAfter}
			record(undos, undo{sh: sh, alg: alg, key: op.Key, isNew: isNew, token: old})
		}
	case sluice.FixedWindow, sluice.SlidingWindow:
		m := sh.fixed
		if alg == sluice.SlidingWindow {
			m = sh.slide
		}
		st := m[op.Key]
		var old windowState
		if st != nil {
			old = *st
		}
		var ns algorithm.WindowState
		if alg == sluice.FixedWindow {
			ns, d = algorithm.FixedWindow(old.s, now, cost, p)
		} else {
			ns, d = algorithm.SlidingWindow(old.s, now, cost, p)
		}
		if d.OK() && cost > 0 {
			isNew := st == nil
			if isNew {
				st = &windowState{}
				m[s.admit(sh, now, op.Key)] = st
			}
			*st = windowState{s: ns, exp: now + d.ResetAfter}
			record(undos, undo{sh: sh, alg: alg, key: op.Key, isNew: isNew, win: old})
		}
	case sluice.SlidingLog, sluice.Concurrency:
		m := sh.slog
		if alg == sluice.Concurrency {
			m = sh.conc
		}
		st := m[op.Key]
		var log []algorithm.Entry
		if st != nil {
			log = st.log
		}
		var entry algorithm.Entry
		switch {
		case op.Release:
			log, d = algorithm.Release(log, now, op.Lease, p)
		case alg == sluice.Concurrency:
			if cost > 0 {
				lease = s.lease.Add(1)
				entry = algorithm.Entry{At: now + p.Window, N: cost, ID: lease}
			}
			log, d = algorithm.Concurrency(log, now, cost, lease, p)
		default:
			entry = algorithm.Entry{At: now, N: cost}
			log, d = algorithm.SlidingLog(log, now, cost, p)
		}
		if st != nil {
			// Pruning and releases are kept even when denied: they change
			// no later decision (pruning) or are not charges (releases).
			st.log = log
			st.exp = now + d.ResetAfter
		}
		if d.OK() && cost > 0 && !op.Release {
			isNew := st == nil
			if isNew {
				st = &logState{log: log, exp: now + d.ResetAfter}
				m[s.admit(sh, now, op.Key)] = st
			}
			record(undos, undo{sh: sh, alg: alg, key: op.Key, isNew: isNew, entry: entry})
		} else {
			lease = 0
		}
	}
	*out = sluice.FromDecision(d)
	out.Lease = lease
	return nil
}

func record(undos *[]undo, u undo) {
	if undos != nil {
		*undos = append(*undos, u)
	}
}
