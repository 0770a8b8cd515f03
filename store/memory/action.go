package memory

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/algorithm"
)

// Charge, refund and reset (sluice.Action): never denied, off the hot path.
// A key whose state is fresh after the action is deleted, as the Redis store
// deletes it, so that both answer alike even when the clock steps back.

// applyAction applies an op whose Action is not Take. Requires sh.mu.
func (s *store) applyAction(sh *shard, op *sluice.Op, h uint64, now int64, p algorithm.Params, undos *[]undo) algorithm.Decision {
	if op.Action == sluice.Reset {
		s.forget(sh, op, h, undos)
	}
	if op.Action == sluice.Reset || op.Cost == 0 {
		look := sluice.Op{Key: op.Key, Limit: op.Limit}
		var d algorithm.Decision
		switch alg := op.Limit.Algorithm; alg {
		case sluice.GCRA, sluice.LeakyBucket:
			d = s.applyTAT(sh, alg, op.Key, 0, h, now, p, nil)
		case sluice.TokenBucket:
			d = s.applyToken(sh, op.Key, 0, h, now, p, nil)
		case sluice.FixedWindow, sluice.SlidingWindow:
			d = s.applyWindow(sh, alg, op.Key, 0, h, now, p, nil)
		default:
			d, _ = s.applyLog(sh, &look, h, now, p, nil)
		}
		return d
	}
	charge := op.Action == sluice.Charge
	switch alg := op.Limit.Algorithm; alg {
	case sluice.GCRA, sluice.LeakyBucket, sluice.TokenBucket:
		t := s.tatTable(sh, alg)
		i, found, old := t.get(h, op.Key)
		// token_bucket's state is kept as its TAT (see tatState), so the
		// TAT arithmetic serves all three.
		settle := algorithm.RefundTAT
		if charge {
			settle = algorithm.ChargeTAT
		}
		tat, d := settle(old.tat, now, op.Cost, p)
		if tat != old.tat {
			write(s, sh, t, h, op.Key, i, found, tatState{tat}, tat, now)
			if undos != nil {
				*undos = append(*undos, undo{sh: sh, alg: alg, h: h, key: op.Key, isNew: !found, tat: old})
			}
		}
		return d
	case sluice.FixedWindow, sluice.SlidingWindow:
		t := sh.windowTable(alg)
		i, found, old := t.get(h, op.Key)
		var settle func(algorithm.WindowState, int64, int64, algorithm.Params) (algorithm.WindowState, algorithm.Decision)
		switch {
		case alg == sluice.FixedWindow && charge:
			settle = algorithm.ChargeFixedWindow
		case alg == sluice.FixedWindow:
			settle = algorithm.RefundFixedWindow
		case charge:
			settle = algorithm.ChargeSlidingWindow
		default:
			settle = algorithm.RefundSlidingWindow
		}
		ns, d := settle(old.s, now, op.Cost, p)
		if ns != old.s {
			exp := now + d.ResetAfter
			write(s, sh, t, h, op.Key, i, found, windowState{s: ns, exp: exp}, exp, now)
			if undos != nil {
				*undos = append(*undos, undo{sh: sh, alg: alg, h: h, key: op.Key, isNew: !found, win: old})
			}
		}
		return d
	default: // sliding_log: stack.CheckOp refuses charges and refunds of concurrency
		t := &sh.slog
		i, found, st := t.get(h, op.Key)
		var log []algorithm.Entry
		if found {
			log = st.log
		}
		var u undo
		if undos != nil {
			u = undo{sh: sh, alg: alg, h: h, key: op.Key, isNew: !found}
			if found && !charge {
				u.snap = &logState{log: slices.Clone(st.log), exp: st.exp}
			}
		}
		var d algorithm.Decision
		if charge {
			// The units the charge adds at now (it may add fewer than
			// the cost, at the cap), for an undo.
			before := unitsAfter(log, now-p.Window)
			log, d = algorithm.ChargeSlidingLog(log, now, op.Cost, p)
			u.entry = algorithm.Entry{At: now, N: unitsAfter(log, now-p.Window) - before}
		} else {
			log, d = algorithm.RefundSlidingLog(log, now, op.Cost, p)
		}
		exp := now + d.ResetAfter
		switch {
		case len(log) == 0:
			if found {
				t.deleteAt(s.seed, i)
				sh.count--
			}
		case found:
			st.log, st.exp = log, exp
			sh.note(exp)
		default:
			put(s, sh, t, h, op.Key, i, false, &logState{log: log, exp: exp}, now)
			sh.note(exp)
		}
		if undos != nil && (u.snap != nil || u.entry.N > 0) {
			*undos = append(*undos, u)
		}
		return d
	}
}

// tatTable is the table of a bucket algorithm.
func (s *store) tatTable(sh *shard, alg sluice.Algorithm) *table[tatState] {
	switch alg {
	case sluice.GCRA:
		return &sh.gcra
	case sluice.LeakyBucket:
		return &sh.leaky
	}
	return &sh.token
}

// windowTable is the table of a window algorithm.
func (sh *shard) windowTable(alg sluice.Algorithm) *table[windowState] {
	if alg == sluice.SlidingWindow {
		return &sh.slide
	}
	return &sh.fixed
}

// write stores v for key (found at slot i, or not), or deletes the key when
// v is fresh at now (exp ≤ now). Requires sh.mu.
func write[V any](s *store, sh *shard, t *table[V], h uint64, key string, i int, found bool, v V, exp, now int64) {
	if exp <= now {
		if found {
			t.deleteAt(s.seed, i)
			sh.count--
		}
		return
	}
	put(s, sh, t, h, key, i, found, v, now)
	sh.note(exp)
}

// forget deletes op's key (a reset), recording how to put it back when
// undos is non-nil. Requires sh.mu.
func (s *store) forget(sh *shard, op *sluice.Op, h uint64, undos *[]undo) {
	alg := op.Limit.Algorithm
	u := undo{sh: sh, alg: alg, h: h, key: op.Key}
	var found bool
	switch alg {
	case sluice.GCRA, sluice.LeakyBucket, sluice.TokenBucket:
		u.tat, found = drop(s, sh, s.tatTable(sh, alg), h, op.Key)
	case sluice.FixedWindow, sluice.SlidingWindow:
		u.win, found = drop(s, sh, sh.windowTable(alg), h, op.Key)
	case sluice.SlidingLog:
		u.snap, found = drop(s, sh, &sh.slog, h, op.Key)
	default:
		u.snap, found = drop(s, sh, &sh.conc, h, op.Key)
	}
	if found && undos != nil {
		*undos = append(*undos, u)
	}
}

// drop deletes key from t and returns its value, if it was there.
func drop[V any](s *store, sh *shard, t *table[V], h uint64, key string) (V, bool) {
	i, found, v := t.get(h, key)
	if found {
		t.deleteAt(s.seed, i)
		sh.count--
	}
	return v, found
}

// unitsAfter sums the units of the log entries with At > t.
func unitsAfter(log []algorithm.Entry, t int64) int64 {
	var n int64
	for _, e := range log {
		if e.At > t {
			n += e.N
		}
	}
	return n
}

// Keys implements stack.KeyLister: up to max (≥ 1) keys that start with
// prefix, as Op.Key names them (a key used under several algorithms is
// listed once), skipping keys already back in their fresh state; more
// reports that the walk stopped at max with keys left to list. It locks
// one shard at a time, so Takes go on meanwhile and the list is not a
// snapshot: a key listed may have been reset or gone fresh since. It
// checks ctx between shards. Safe for concurrent use.
func (s *store) Keys(ctx context.Context, prefix string, max int) ([]string, bool, error) {
	if max < 1 {
		return nil, false, fmt.Errorf("memory: keys: max %d, want ≥ 1", max)
	}
	var keys []string
	seen := map[string]struct{}{}
	now := s.clock()
	for i := range s.shards {
		if err := ctx.Err(); err != nil {
			return nil, false, fmt.Errorf("memory: keys: %w", err)
		}
		sh := &s.shards[i]
		sh.mu.Lock()
		full := false
		add := func(key string, exp int64) bool {
			if exp <= now || !strings.HasPrefix(key, prefix) {
				return true
			}
			if _, dup := seen[key]; dup {
				return true
			}
			if len(keys) == max {
				full = true
				return false
			}
			seen[key] = struct{}{}
			keys = append(keys, key)
			return true
		}
		tat := func(v *tatState) int64 { return v.tat }
		win := func(v *windowState) int64 { return v.exp }
		log := func(v **logState) int64 { return (*v).exp }
		_ = eachKey(&sh.gcra, tat, add) && eachKey(&sh.leaky, tat, add) && eachKey(&sh.token, tat, add) &&
			eachKey(&sh.fixed, win, add) && eachKey(&sh.slide, win, add) &&
			eachKey(&sh.slog, log, add) && eachKey(&sh.conc, log, add)
		sh.mu.Unlock()
		if full {
			return keys, true, nil
		}
	}
	return keys, false, nil
}

// eachKey calls f with each key of t and its expiry until f returns false,
// and reports whether it went through them all.
func eachKey[V any](t *table[V], exp func(*V) int64, f func(string, int64) bool) bool {
	for i, c := range t.ctrl {
		if c != 0 && !f(t.slots[i].key, exp(&t.slots[i].v)) {
			return false
		}
	}
	return true
}
