package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-rl/sluice"
)

// Allotments for store/hybrid: scripts/allot.lua, one atomic call per
// request, on the same keys and state as Take.

var (
	allotOnce   sync.Once
	allotScript *rueidis.Lua
)

func allotLua() *rueidis.Lua {
	allotOnce.Do(func() { allotScript = rueidis.NewLuaScript(compose("lib.lua", "allot.lua")) })
	return allotScript
}

// maxLease caps how long a gcra allotment may be spent.
const maxLease = time.Hour

// Allot implements sluice.Allotter: for each request, in one atomic script
// call, it takes up to Want units of the key's quota (never bringing what
// remains below Keep, and at most 1/Split of what stands above it), after
// giving back Give units of the allotment of Epoch. The units taken are
// counted exactly as a Take would count them, so Takes of the same Key and
// Limit see them as spent. Supported: fixed_window and gcra
// (sluice.AllotAlgorithm). Calls of several requests are pipelined; each is
// atomic on its own.
//
// The requests for one node go through that node's circuit breaker as one
// call, as a Take's script call does: while the breaker is open they fail
// at once with an error wrapping sluice.ErrStoreUnavailable and nothing is
// sent; a call with no reply within Options.Timeout fails with one wrapping
// sluice.ErrStoreTimeout (it may still have run) and counts as a timeout.
// A caller whose ctx ends first gets an error wrapping ctx.Err() at once;
// the call still runs to its end and counts for the breaker, as a Take's
// does (what it grants is lost: counted, never spent). Requests for nodes
// whose breaker lets them through are sent even when another node's does
// not.
func (s *Store) Allot(ctx context.Context, reqs []sluice.AllotRequest, out []sluice.Allotment) error {
	if len(out) != len(reqs) {
		return fmt.Errorf("redis: allot: %d requests, %d results: %w", len(reqs), len(out), sluice.ErrResultsLength)
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
	execs := make([]rueidis.LuaExec, len(reqs))
	for i := range reqs {
		r := &reqs[i]
		op := sluice.Op{Key: r.Key, Limit: r.Limit, Cost: r.Want}
		if err := op.Check(); err != nil {
			return fmt.Errorf("redis: allot: %w", err)
		}
		if !sluice.AllotAlgorithm(r.Limit.Algorithm) {
			return fmt.Errorf("redis: allot %q: %v cannot be allotted (want fixed_window or gcra)", r.Key, r.Limit.Algorithm)
		}
		if r.Keep < 0 || r.Give < 0 {
			return fmt.Errorf("redis: allot %q: negative keep %d or give %d", r.Key, r.Keep, r.Give)
		}
		p := r.Limit.Params()
		lease := time.Duration(p.Window) * time.Microsecond
		lease = min(lease, maxLease)
		execs[i] = rueidis.LuaExec{
			Keys: []string{redisKey(s.prefix, r.Limit.Algorithm, r.Key)},
			Args: []string{
				s.minTTL, now, strconv.Itoa(int(r.Limit.Algorithm)),
				strconv.FormatInt(p.Quota, 10), strconv.FormatInt(p.Window, 10),
				strconv.FormatInt(p.Burst, 10), strconv.FormatInt(p.Interval, 10),
				strconv.FormatInt(r.Want, 10), strconv.FormatInt(r.Keep, 10),
				strconv.FormatInt(max(r.Split, 1), 10), strconv.FormatInt(r.Give, 10),
				strconv.FormatInt(r.Epoch, 10), strconv.FormatInt(lease.Microseconds(), 10),
			},
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redis: allot: nothing sent: %w", err)
	}
	calls, errs := s.allotCalls(execs)
	if len(calls) == 0 {
		return errors.Join(errs...)
	}
	// As with a Take's script call, the timeout starts when the call is
	// handed to the client, and the call runs to its end (and is counted)
	// even when the caller stops waiting for it.
	res := make([]sluice.Allotment, len(reqs))
	done := make(chan []error, 1)
	go func() { done <- s.allotExec(calls, execs, res) }()
	select {
	case callErrs := <-done:
		copy(out, res)
		return errors.Join(append(errs, callErrs...)...)
	case <-ctx.Done():
		return errors.Join(append(errs, fmt.Errorf("redis: allot: gave up waiting for the reply (the script may still run): %w", ctx.Err()))...)
	}
}

// allotExec sends the requests of calls in one pipeline, fills res, tells
// each call's breaker how it went, and returns an error per failed call.
func (s *Store) allotExec(calls []*allotCall, execs []rueidis.LuaExec, res []sluice.Allotment) []error {
	var send []rueidis.LuaExec
	for _, c := range calls {
		for _, i := range c.idx {
			send = append(send, execs[i])
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	s.allots.Add(uint64(len(send)))
	resps := allotLua().ExecMulti(ctx, s.client, send...)
	closed := s.closed.Load()
	var errs []error
	pos := 0
	for _, c := range calls {
		var first error // the call's outcome for the breaker
		for _, i := range c.idx {
			vals, err := resps[pos].AsIntSlice()
			pos++
			if err == nil && len(vals) != 5 {
				err = &replyError{fmt.Errorf("reply of %d values, want 5", len(vals))}
			}
			if err != nil {
				if first == nil {
					first = fmt.Errorf("%s: %w", execs[i].Keys[0], err)
				}
				continue
			}
			res[i] = sluice.Allotment{
				Granted:    vals[0],
				Remaining:  vals[1],
				TTL:        time.Duration(vals[2]) * time.Microsecond,
				ResetAfter: time.Duration(vals[3]) * time.Microsecond,
				Epoch:      vals[4],
			}
		}
		o := classify(first, closed)
		c.report(o, first)
		if first != nil {
			what := fmt.Sprintf("redis: allot (%d requests) to %s", len(c.idx), c.n.name())
			errs = append(errs, s.callError(what, first, o, closed))
		}
	}
	return errs
}

// allotCall is the requests of one Allot bound for one node, let through by
// its breaker; report tells the breaker how the call ended.
type allotCall struct {
	n      *node
	idx    []int // indices into the Allot's requests
	report func(callOutcome, error)
}

// allotCalls groups the requests by the node owning their key and asks
// each node's breaker for one call. It returns the calls let through, and
// an error wrapping sluice.ErrStoreUnavailable for each node refused.
func (s *Store) allotCalls(execs []rueidis.LuaExec) ([]*allotCall, []error) {
	var calls []*allotCall
	for i := range execs {
		n := s.nodeFor(slotOf(execs[i].Keys[0]))
		k := slices.IndexFunc(calls, func(c *allotCall) bool { return c.n == n })
		if k < 0 {
			k = len(calls)
			calls = append(calls, &allotCall{n: n})
		}
		calls[k].idx = append(calls[k].idx, i)
	}
	var errs []error
	allowed := calls[:0]
	for _, c := range calls {
		report, err := c.n.allow()
		if err != nil {
			errs = append(errs, fmt.Errorf("redis: allot (%d requests): %w", len(c.idx), err))
			continue
		}
		c.report = report
		allowed = append(allowed, c)
	}
	return allowed, errs
}

// Allots is the number of allotment requests sent since New.
func (s *Store) Allots() uint64 { return s.allots.Load() }
