package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/algorithm"
	"github.com/sluice-rl/sluice/store/stack"
)

// Allotments (stack.Allotter), with the arithmetic of the Redis store's
// scripts/allot.lua on the same per-key state Take keeps: a fixed window's
// (window index, count) and gcra's TAT. Off the hot path: Take is
// untouched.

var _ stack.Allotter = (*Store)(nil)

// maxLease caps how long a gcra allotment may be spent (as the Redis
// store's does).
const maxLease = time.Hour

// Allot implements stack.Allotter: for each request, atomically under its
// key's shard lock, it takes up to Want units of the key's quota (never
// bringing what remains below Keep, and at most 1/Split of what stands
// above it), after giving back Give units of the allotment of Epoch. The
// units are counted exactly as a Take counts them, in the same state, so
// Takes of the same Key and Limit see them as spent. Supported:
// fixed_window (TTL to the window's end, Epoch the window index ⌊now /
// Window⌋; a give-back counts only in its own window) and gcra (tokens
// taken now; TTL min(Window, 1 h); Epoch 0; a give-back is applied whatever
// its epoch, as the TAT has no periods). Requests are applied in order, so
// two for the same key see each other.
//
// Every request is checked before any is applied: an invalid one (a bad
// limit, Want above algorithm.MaxExact, another algorithm, negative Keep or
// Give) fails the call and nothing is granted. A ctx already done fails it
// the same way; otherwise Allot never blocks on anything but shard locks.
func (s *store) Allot(ctx context.Context, reqs []stack.AllotRequest, out []stack.Allotment) error {
	if len(out) != len(reqs) {
		return fmt.Errorf("memory: allot: %d requests, %d results: %w", len(reqs), len(out), stack.ErrResultsLength)
	}
	for i := range reqs {
		r := &reqs[i]
		op := sluice.Op{Key: r.Key, Limit: r.Limit, Cost: r.Want}
		if err := stack.CheckOp(&op); err != nil {
			return fmt.Errorf("memory: allot: %w", err)
		}
		if !stack.AllotAlgorithm(r.Limit.Algorithm) {
			return fmt.Errorf("memory: allot %q: %v cannot be allotted (want fixed_window or gcra)", r.Key, r.Limit.Algorithm)
		}
		if r.Keep < 0 || r.Give < 0 {
			return fmt.Errorf("memory: allot %q: negative keep %d or give %d", r.Key, r.Keep, r.Give)
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: allot: nothing granted: %w", err)
	}
	now := s.clock()
	for i := range reqs {
		r := &reqs[i]
		h := s.hash(r.Key)
		sh := &s.shards[s.shardOf(h)]
		sh.mu.Lock()
		p, err := sh.params(&r.Limit)
		if err == nil {
			if r.Limit.Algorithm == sluice.FixedWindow {
				out[i] = s.allotWindow(sh, r, h, now, p)
			} else {
				out[i] = s.allotTAT(sh, r, h, now, p)
			}
		}
		sh.mu.Unlock()
		if err != nil { // unreachable: checked above
			return fmt.Errorf("memory: allot: %w", err)
		}
	}
	return nil
}

// allotWindow is allot.lua's fixed window. Requires sh.mu.
func (s *store) allotWindow(sh *shard, r *stack.AllotRequest, h uint64, now int64, p algorithm.Params) stack.Allotment {
	t := &sh.fixed
	i, found, old := t.get(h, r.Key)
	id, cur := old.s.ID, old.s.Cur
	if nid := max(algorithm.FloorDiv(now, p.Window), id); nid != id {
		id, cur = nid, 0
	} else if r.Give > 0 && r.Epoch == id {
		cur = max(cur-r.Give, 0)
	}
	n := max(min(r.Want, algorithm.FloorDiv(max(p.Quota-cur-r.Keep, 0), max(r.Split, 1))), 0)
	cur += n
	stop := (id+1)*p.Window - now
	var reset int64
	if cur > 0 {
		reset = stop
	}
	if n > 0 || r.Give > 0 {
		// A count back at zero is the fresh state: write deletes the key.
		write(s, sh, t, h, r.Key, i, found, windowState{s: algorithm.WindowState{ID: id, Cur: cur}, exp: now + reset}, now+reset, now)
	}
	return stack.Allotment{
		Granted:    n,
		Remaining:  max(p.Quota-cur, 0), // a charge may have put cur above the quota
		TTL:        time.Duration(stop) * time.Microsecond,
		ResetAfter: time.Duration(reset) * time.Microsecond,
		Epoch:      id,
	}
}

// allotTAT is allot.lua's gcra. Requires sh.mu.
func (s *store) allotTAT(sh *shard, r *stack.AllotRequest, h uint64, now int64, p algorithm.Params) stack.Allotment {
	t := &sh.gcra
	i, found, old := t.get(h, r.Key)
	tat := old.tat
	if r.Give > 0 {
		ahead := max(tat-now, 0)
		if r.Give > ahead/p.Interval { // give × Interval ≥ ahead, computed without overflow
			tat -= ahead
		} else {
			tat -= r.Give * p.Interval
		}
	}
	base := max(tat, now)
	rem := min(max(algorithm.FloorDiv(p.Burst*p.Interval-(base-now), p.Interval), 0), p.Burst)
	n := max(min(r.Want, algorithm.FloorDiv(max(rem-r.Keep, 0), max(r.Split, 1))), 0)
	ntat := base + n*p.Interval
	if n > 0 || r.Give > 0 {
		write(s, sh, t, h, r.Key, i, found, tatState{ntat}, ntat, now)
	}
	return stack.Allotment{
		Granted:    n,
		Remaining:  rem - n,
		TTL:        min(time.Duration(p.Window)*time.Microsecond, maxLease),
		ResetAfter: time.Duration(max(ntat-now, 0)) * time.Microsecond,
	}
}
