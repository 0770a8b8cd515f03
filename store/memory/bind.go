package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/algorithm"
	"github.com/sluice-rl/sluice/store/stack"
)

// Bind returns take, which is TakeOne of the op {Key: key, Limit: l, Cost:
// cost} (a Take, no release, no chosen lease), with l validated and its
// algorithm parameters derived once, here: a call is the key's lookup and
// the algorithm's step, with no per-call validation of the limit or
// dispatch on its algorithm. It shares the keys' state with Take and
// TakeOne (an op on the same key and limit sees what take charged, and the
// reverse). take is safe for concurrent use, never consults ctx, and
// returns an error only for a cost below 0 or above algorithm.MaxExact. Bind
// returns an error if l is not valid.
//
// sluice.Limiter binds its limit this way when its store has Bind.
func (st *Store) Bind(l sluice.Limit) (take func(ctx context.Context, key string, cost int64) (sluice.Result, error), err error) {
	if err := stack.CheckOp(&sluice.Op{Limit: l}); err != nil {
		return nil, fmt.Errorf("memory: %w", err)
	}
	b := &bound{s: st.store, limit: l, alg: l.Algorithm, p: stack.Params(l)}
	// Each take is a function literal, not a method value (b.takeTAT), whose
	// generated wrapper would copy the Result once more.
	switch l.Algorithm {
	case sluice.GCRA, sluice.LeakyBucket:
		// applyTAT's step, written out for the one algorithm: the hottest
		// path of the library (Limiter.Allow with gcra).
		leaky := l.Algorithm == sluice.LeakyBucket
		return func(_ context.Context, key string, cost int64) (sluice.Result, error) {
			if uint64(cost) > algorithm.MaxExact { // a negative cost too
				return sluice.Result{}, b.badCost(key, cost)
			}
			s := b.s
			var now int64
			if c := &s.coarse; s.now == nil && c.running.Load() && c.read.Load() {
				now = c.now.Load() // clock's common case, inlined
			} else {
				now = s.clock()
			}
			h := s.hash(key)
			sh := &s.shards[s.shardOf(h)]
			t := &sh.gcra
			if leaky {
				t = &sh.leaky
			}
			sh.mu.Lock()
			i, found := t.find(h, key)
			var old int64
			if found {
				old = t.slots[i].v.tat
			}
			var tat int64
			var d algorithm.Decision
			if leaky {
				tat, d = algorithm.LeakyBucket(old, now, cost, b.p)
			} else {
				tat, d = algorithm.GCRA(old, now, cost, b.p)
			}
			if d.Reason == algorithm.Allowed && cost > 0 {
				if found {
					t.slots[i].v.tat = tat
				} else {
					put(s, sh, t, h, key, i, false, tatState{tat}, now)
				}
				sh.note(tat)
			}
			sh.mu.Unlock()
			return sluice.Result{
				Allowed:    d.Reason == algorithm.Allowed,
				Reason:     sluice.Reason(d.Reason),
				Limit:      d.Limit,
				Remaining:  d.Remaining,
				ResetAfter: time.Duration(d.ResetAfter) * time.Microsecond,
				RetryAfter: time.Duration(d.RetryAfter) * time.Microsecond,
				Delay:      time.Duration(d.Delay) * time.Microsecond,
				At:         now,
			}, nil
		}, nil
	case sluice.TokenBucket:
		return func(_ context.Context, key string, cost int64) (r sluice.Result, err error) {
			if uint64(cost) > algorithm.MaxExact {
				return r, b.badCost(key, cost)
			}
			s := b.s
			now := s.clock()
			h := s.hash(key)
			sh := &s.shards[s.shardOf(h)]
			sh.mu.Lock()
			d := s.applyToken(sh, key, cost, h, now, b.p, nil)
			sh.mu.Unlock()
			writeResult(&r, d, 0, now)
			return r, nil
		}, nil
	case sluice.FixedWindow, sluice.SlidingWindow:
		return func(_ context.Context, key string, cost int64) (r sluice.Result, err error) {
			if uint64(cost) > algorithm.MaxExact {
				return r, b.badCost(key, cost)
			}
			s := b.s
			now := s.clock()
			h := s.hash(key)
			sh := &s.shards[s.shardOf(h)]
			sh.mu.Lock()
			d := s.applyWindow(sh, b.alg, key, cost, h, now, b.p, nil)
			sh.mu.Unlock()
			writeResult(&r, d, 0, now)
			return r, nil
		}, nil
	}
	// The log algorithms (sliding_log, concurrency), whose step needs the
	// whole op: apply's path, less the limit's validation.
	return func(_ context.Context, key string, cost int64) (r sluice.Result, err error) {
		if uint64(cost) > algorithm.MaxExact {
			return r, b.badCost(key, cost)
		}
		s := b.s
		o := sluice.Op{Key: key, Limit: b.limit, Cost: cost}
		now := s.clock()
		h := s.hash(key)
		sh := &s.shards[s.shardOf(h)]
		sh.mu.Lock()
		d, lease := s.applyLog(sh, &o, h, now, b.p, nil)
		sh.mu.Unlock()
		writeResult(&r, d, lease, now)
		return r, nil
	}, nil
}

// bound is a limit bound by Bind: valid, its params derived.
type bound struct {
	s     *store
	limit sluice.Limit
	alg   sluice.Algorithm
	p     algorithm.Params
}

// badCost returns Check's error for a cost out of range.
func (b *bound) badCost(key string, cost int64) error {
	return fmt.Errorf("memory: %w", stack.CheckOp(&sluice.Op{Key: key, Limit: b.limit, Cost: cost}))
}
