// Package memory is the in-process sluice.Store: sharded maps of per-key
// state, zero allocations per decision on existing keys, idle keys forgotten,
// and a cap on the number of live keys.
package memory

import (
	"context"
	"fmt"
	"hash/maphash"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/algorithm"
	"github.com/sluice-rl/sluice/batch"
	"github.com/sluice-rl/sluice/store/stack"
)

// Options configure a Store. The zero value is usable: every field has a
// default.
type Options struct {
	// Shards is the number of independently locked shards, rounded up to a
	// power of two. Default 256.
	Shards int
	// MaxKeys caps the number of live keys. When a shard is full, inserting a
	// new key first evicts the sampled key closest to (or already back in)
	// its fresh state, and counts the eviction in Stats. An evicted key that
	// was mid-window starts fresh: it may get quota back early, which is why
	// the cap should be sized for the expected key count with room to spare.
	// Keys that are already fresh are freed first (see cap.go), so only
	// keys mid-window are ever evicted. The cap is enforced per shard
	// (MaxKeys/Shards each), so evictions may begin a little before the
	// total reaches it. A key costs about 150 bytes plus twice its length
	// in RSS (measured: 348 MiB at the default cap with 90-byte keys;
	// sliding_log and concurrency keys add 24 bytes per logged hit).
	// Default DefaultMaxKeys; negative means no cap.
	MaxKeys int
	// Now, if set, is the clock (tests inject a fake one). Default: a coarse
	// clock updated every ClockResolution by a background goroutine, because
	// time.Now costs more than a whole decision.
	Now func() time.Time
	// ClockResolution is the coarse clock's tick. Default 1ms.
	ClockResolution time.Duration
	// SweepInterval is how often idle keys (back in their fresh state, so
	// dropping them changes no decision) are deleted. Default 10s.
	SweepInterval time.Duration
}

// DefaultMaxKeys is the key cap when Options.MaxKeys is zero: 1,048,576
// keys, about 350 MiB of RSS with keys of 90 bytes.
const DefaultMaxKeys = 1 << 20

// Stats are counters of a Store.
type Stats struct {
	// Keys is the number of live keys.
	Keys int
	// Evictions counts keys dropped at the MaxKeys cap before they were fresh.
	Evictions uint64
	// Swept counts idle keys deleted because they were back in fresh state.
	Swept uint64
}

// Store is the in-process store. It is safe for concurrent use. Close it to
// stop its background goroutine (an unreachable Store stops it too).
//
// It applies every sluice.Action: Charge and Refund with the arithmetic of
// package algorithm (ChargeTAT, RefundFixedWindow, …), Reset by deleting
// the key; a key a refund brings back to its fresh state is deleted too. A
// batch that a Take denies applies none of its ops, actions included. It
// implements stack.KeyLister (Keys) and stack.Claimer (Claim).
type Store struct {
	*store
}

var (
	_ stack.KeyLister = (*Store)(nil)
	_ stack.Claimer   = (*Store)(nil)
	_ batch.Decider   = (*Store)(nil)
)

// Decide implements batch.Decider: batch.Run over Take in mode
// batch.Atomic, since a batch mixing Takes with Charges and Refunds is
// all-or-nothing here (one call unless a Shadow or Quota op is denied, or
// the batch is denied with Settle ops or a penalty to start).
func (s *Store) Decide(ctx context.Context, b *batch.Batch) error {
	return batch.Run(ctx, s, b, batch.Atomic)
}

type store struct {
	shards    []shard
	mask      uint64
	seed      maphash.Seed
	now       func() int64 // µs since the epoch; nil means the coarse clock
	coarse    coarseClock
	lease     atomic.Uint64
	evictions atomic.Uint64
	swept     atomic.Uint64
	shardCap  int
	stop      chan struct{}
	stopOnce  sync.Once
	done      chan struct{}
	claims    claims // Claim's names (claim.go)
}

// New returns a Store configured by opts.
func New(opts Options) *Store {
	n := opts.Shards
	if n <= 0 {
		n = 256
	}
	n = min(n, 256) // shard index comes from the top 8 bits of the hash
	shards := 1
	for shards < n {
		shards <<= 1
	}
	maxKeys := opts.MaxKeys
	if maxKeys == 0 {
		maxKeys = DefaultMaxKeys
	}
	s := &store{
		shards: make([]shard, shards),
		mask:   uint64(shards - 1),
		seed:   maphash.MakeSeed(),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	if maxKeys > 0 {
		s.shardCap = max(1, (maxKeys+shards-1)/shards)
	}
	res := opts.ClockResolution
	if res <= 0 {
		res = time.Millisecond
	}
	sweep := opts.SweepInterval
	if sweep <= 0 {
		sweep = 10 * time.Second
	}
	if opts.Now != nil {
		now := opts.Now
		s.now = func() int64 { return now().UnixMicro() }
		res = 0
	} else {
		s.coarse.init(res, s.stop)
	}
	go s.background(sweep)
	out := &Store{s}
	runtime.AddCleanup(out, func(s *store) { s.close() }, s)
	return out
}

// Close stops the background goroutine. The Store still answers afterwards,
// but its default clock no longer advances, so close it only when done.
func (s *Store) Close() error {
	s.close()
	return nil
}

func (s *store) close() {
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.done
}

// background sweeps idle keys (the coarse clock ticks on its own, clock.go).
func (s *store) background(sweep time.Duration) {
	defer close(s.done)
	sw := time.NewTicker(sweep)
	defer sw.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-sw.C:
			s.Sweep()
		}
	}
}

// Sweep deletes every key that is back in its fresh state now, and every
// expired claim (Claim). The Store calls it every SweepInterval; tests
// call it directly.
func (s *store) Sweep() {
	now := s.clock()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		s.swept.Add(uint64(s.sweepShard(sh, now)))
		sh.mu.Unlock()
	}
	s.claims.mu.Lock()
	s.claims.dropExpired(now)
	s.claims.mu.Unlock()
}

// Stats returns the Store's counters.
func (s *store) Stats() Stats {
	st := Stats{Evictions: s.evictions.Load(), Swept: s.swept.Load()}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Keys += sh.count
		sh.mu.Unlock()
	}
	return st
}

// clock returns the time in µs: the coarse clock unless Options.Now was set.
// (A direct atomic load: an indirect call here shows in the hot path.)
func (s *store) clock() int64 {
	if s.now != nil {
		return s.now()
	}
	return s.coarse.load()
}

// hash returns the hash of key, which picks both its shard (top bits) and
// its slot in the shard's table (low bits).
func (s *store) hash(key string) uint64 { return maphash.String(s.seed, key) }

func (s *store) shardOf(h uint64) int { return int((h >> 56) & s.mask) }

// Take implements sluice.Store. It never blocks on anything but its shards'
// locks, so it does not consult ctx.
func (s *store) Take(_ context.Context, ops []sluice.Op, results []sluice.Result) error {
	if len(results) != len(ops) {
		return fmt.Errorf("memory: %d ops, %d results: %w", len(ops), len(results), stack.ErrResultsLength)
	}
	for i := range ops {
		if ops[i].Cost < 0 || ops[i].Cost > algorithm.MaxExact || ops[i].Release || ops[i].Action != sluice.Take || ops[i].Lease != 0 {
			if err := stack.CheckOp(&ops[i]); err != nil {
				return fmt.Errorf("memory: %w", err)
			}
		}
	}
	now := s.clock()
	if len(ops) == 1 {
		h := s.hash(ops[0].Key)
		sh := &s.shards[s.shardOf(h)]
		sh.mu.Lock()
		err := s.apply(sh, &ops[0], h, now, nil, &results[0])
		sh.mu.Unlock()
		if err != nil {
			return fmt.Errorf("memory: %w", err)
		}
		return nil
	}
	return s.takeBatch(ops, results, now)
}

// TakeOne is Take of the one op o, with o and its Result passed by value:
// sluice.Limiter calls it through an interface without allocating (slices
// passed through an interface escape to the heap).
func (st *Store) TakeOne(_ context.Context, o sluice.Op) (sluice.Result, error) {
	s := st.store // a method of Store itself: no wrapper copies o once more
	var r sluice.Result
	if o.Cost < 0 || o.Cost > algorithm.MaxExact || o.Release || o.Action != sluice.Take || o.Lease != 0 {
		if err := stack.CheckOp(&o); err != nil {
			return r, fmt.Errorf("memory: %w", err)
		}
	}
	now := s.clock()
	h := s.hash(o.Key)
	sh := &s.shards[s.shardOf(h)]
	sh.mu.Lock()
	err := s.apply(sh, &o, h, now, nil, &r)
	sh.mu.Unlock()
	if err != nil {
		return sluice.Result{}, fmt.Errorf("memory: %w", err)
	}
	return r, nil
}

// takeBatch applies several ops atomically: it locks every shard involved in
// index order (so batches cannot deadlock), applies the ops in order, and if
// any is denied undoes every charge and reports the allowed ones as looks.
func (s *store) takeBatch(ops []sluice.Op, results []sluice.Result, now int64) error {
	var idxBuf [16]int
	var hBuf [16]uint64
	idx, hs := idxBuf[:0], hBuf[:0]
	for i := range ops {
		h := s.hash(ops[i].Key)
		hs = append(hs, h)
		idx = append(idx, s.shardOf(h))
	}
	var lockedBuf [16]int
	locked := append(lockedBuf[:0], idx...)
	slices.Sort(locked)
	locked = slices.Compact(locked)
	for _, i := range locked {
		s.shards[i].mu.Lock()
	}
	defer func() {
		for _, i := range locked {
			s.shards[i].mu.Unlock()
		}
	}()
	var undoBuf [16]undo
	undos := undoBuf[:0]
	denied := false
	for i := range ops {
		err := s.apply(&s.shards[idx[i]], &ops[i], hs[i], now, &undos, &results[i])
		if err != nil {
			for j := len(undos) - 1; j >= 0; j-- {
				undos[j].revert(s)
			}
			return fmt.Errorf("memory: %w", err)
		}
		denied = denied || !results[i].Allowed
	}
	if !denied {
		return nil
	}
	for j := len(undos) - 1; j >= 0; j-- {
		undos[j].revert(s)
	}
	for i := range ops {
		if results[i].Allowed && !ops[i].Release {
			look := ops[i]
			look.Cost, look.Action = 0, sluice.Take
			if stack.Paired(&look) {
				look.Lease = 0 // its record was undone with the batch
			}
			_ = s.apply(&s.shards[idx[i]], &look, hs[i], now, nil, &results[i]) // valid: applied above
		}
	}
	return nil
}

// cloneKey copies a key before it is kept in a map, so the store never pins a
// caller's larger buffer.
func cloneKey(k string) string { return strings.Clone(k) }
