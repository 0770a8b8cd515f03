package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/stack"
)

// Allotments for store/hybrid: scripts/allot.lua, run for groups of mode
// modeAllot, one request each, by scripts/one.lua (in a call of such
// groups and single Takes: one MGET, at most one TIME per call) or else by
// the batch script (driver.lua). An Allot's requests travel through the
// same per-slot batchers, script calls (EVALSHA of a script each node
// loads once; rueidis sends it again with EVAL when a node answers
// NOSCRIPT), per-node breakers and deadline guard as Takes: a node that
// stalls delays only the requests for its own keys.

// maxLease caps how long a gcra allotment may be spent.
const maxLease = time.Hour

// Allot implements stack.Allotter: for each request, atomically, it takes
// up to Want units of the key's quota (never bringing what remains below
// Keep, and at most 1/Split of what stands above it), after giving back
// Give units of the allotment of Epoch. The units taken are counted exactly
// as a Take would count them, so Takes of the same Key and Limit see them
// as spent. Supported: fixed_window and gcra (stack.AllotAlgorithm).
//
// The requests are grouped by hash slot and queued on that slot's batcher,
// as a Take's ops are: they share script calls with Takes bound for the
// same slot, each call sent only to the node owning the slot, through that
// node's circuit breaker. Requests for a node whose breaker is open fail at
// once with an error wrapping sluice.ErrStoreUnavailable and are not sent;
// a call with no reply within Options.Timeout fails its requests with an
// error wrapping sluice.ErrStoreTimeout (it may still have run, or, when
// it reached Redis after its deadline, done nothing) and counts as a
// timeout. Requests for other nodes are sent and answered regardless; the
// error returned joins the failures (the results of the requests that
// succeeded are filled in, but stack.Allotter says a caller assumes
// nothing granted on error). A caller whose ctx ends first gets an error
// wrapping ctx.Err() at once: a request still queued is dropped unsent
// (nothing granted), one already sent runs to its end and counts for the
// breaker (what it grants is lost: counted, never spent).
func (s *Store) Allot(ctx context.Context, reqs []stack.AllotRequest, out []stack.Allotment) error {
	if len(out) != len(reqs) {
		return fmt.Errorf("redis: allot: %d requests, %d results: %w", len(reqs), len(out), stack.ErrResultsLength)
	}
	if len(reqs) == 0 {
		return nil
	}
	if s.closed.Load() {
		return ErrClosed
	}
	var now string
	if s.now != nil {
		now = strconv.FormatInt(s.now().UnixMicro(), 10)
	}
	keys := make([]string, len(reqs))
	for i := range reqs {
		r := &reqs[i]
		op := sluice.Op{Key: r.Key, Limit: r.Limit, Cost: r.Want}
		if err := stack.CheckOp(&op); err != nil {
			return fmt.Errorf("redis: allot: %w", err)
		}
		if !stack.AllotAlgorithm(r.Limit.Algorithm) {
			return fmt.Errorf("redis: allot %q: %v cannot be allotted (want fixed_window or gcra)", r.Key, r.Limit.Algorithm)
		}
		if r.Keep < 0 || r.Give < 0 {
			return fmt.Errorf("redis: allot %q: negative keep %d or give %d", r.Key, r.Keep, r.Give)
		}
		keys[i] = redisKey(s.prefix, r.Limit.Algorithm, r.Key)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redis: allot: nothing sent: %w", err)
	}
	// One group per batch target (the single node, or a cluster slot), in
	// the order first seen.
	type target struct {
		b   *batcher
		n   *node
		idx []int
	}
	var targets []*target
	bySlot := map[int]*target{}
	for i := range reqs {
		slot := -1
		if s.cluster {
			slot = slotOf(keys[i])
		}
		t := bySlot[slot]
		if t == nil {
			t = &target{}
			if slot < 0 {
				t.b, t.n = &s.one, s.nodes.single
			} else {
				t.b, t.n = s.slotBatcher(slot), s.nodeFor(slot)
			}
			bySlot[slot] = t
			targets = append(targets, t)
		}
		t.idx = append(t.idx, i)
	}
	var errs []error
	sent := make([][]*request, len(targets))
	for k, t := range targets {
		if t.n.open() {
			errs = append(errs, fmt.Errorf("redis: allot (%d requests): %w", len(t.idx), t.n.unavailable()))
			continue
		}
		sent[k] = make([]*request, len(t.idx))
		for j, i := range t.idx {
			sent[k][j] = s.newAllotRequest(&reqs[i], keys[i], now)
		}
		t.b.submitAll(sent[k]) // one call for the target's requests
	}
	for k, rs := range sent {
		var failed []error
		for j, r := range rs {
			if err := r.wait(ctx); err != nil {
				failed = append(failed, err)
				continue
			}
			v := r.res[:5]
			out[targets[k].idx[j]] = stack.Allotment{
				Granted:    v[0],
				Remaining:  v[1],
				TTL:        time.Duration(v[2]) * time.Microsecond,
				ResetAfter: time.Duration(v[3]) * time.Microsecond,
				Epoch:      v[4],
			}
		}
		if len(failed) > 0 {
			errs = append(errs, fmt.Errorf("redis: allot (%d of %d requests): %w", len(failed), len(rs), errors.Join(failed...)))
		}
	}
	return errors.Join(errs...)
}

// newAllotRequest builds the group (modeAllot) of the request q, whose
// Redis key is key: one op (limit, spec, ""), spec being
// "want:keep:split:give:epoch:lease" (scripts/allot.lua). It is a one-op
// group (request.one): a call of such groups and single Takes runs
// scripts/one.lua, which reads every key with one MGET.
func (s *Store) newAllotRequest(q *stack.AllotRequest, key, now string) *request {
	r := &request{mode: modeAllot, now: now, done: make(chan struct{}), algs: allotBit, one: true}
	r.keys, r.args = r.key1[:], r.arg1[:3]
	r.keys[0] = key
	r.args[0], r.args[1], r.args[2] = "1", modeAllot, now
	lease := min(q.Limit.Window, maxLease).Microseconds()
	spec := strconv.FormatInt(q.Want, 10) + ":" + strconv.FormatInt(q.Keep, 10) + ":" +
		strconv.FormatInt(max(q.Split, 1), 10) + ":" + strconv.FormatInt(q.Give, 10) + ":" +
		strconv.FormatInt(q.Epoch, 10) + ":" + strconv.FormatInt(lease, 10)
	r.args = append(r.args, limitSpec(q.Limit), spec, "")
	return r
}

// Allots is the number of allotment requests sent since New.
func (s *Store) Allots() uint64 { return s.allots.Load() }
