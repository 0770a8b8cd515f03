package redis

import (
	"context"
	"errors"
	"fmt"
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
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	s.allots.Add(uint64(len(reqs)))
	resps := allotLua().ExecMulti(ctx, s.client, execs...)
	var errs []error
	for i, resp := range resps {
		vals, err := resp.AsIntSlice()
		if err == nil && len(vals) != 5 {
			err = fmt.Errorf("reply of %d values, want 5", len(vals))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("redis: allot %q: %w", reqs[i].Key, err))
			continue
		}
		out[i] = sluice.Allotment{
			Granted:    vals[0],
			Remaining:  vals[1],
			TTL:        time.Duration(vals[2]) * time.Microsecond,
			ResetAfter: time.Duration(vals[3]) * time.Microsecond,
			Epoch:      vals[4],
		}
	}
	if err := errors.Join(errs...); err != nil {
		if s.closed.Load() {
			err = errors.Join(ErrClosed, err)
		}
		return err
	}
	return nil
}

// Allots is the number of allotment requests sent since New.
func (s *Store) Allots() uint64 { return s.allots.Load() }
