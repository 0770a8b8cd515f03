package hybrid

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/stack"
)

// DeniedOptions configure a Denied cache. The zero value is usable.
type DeniedOptions struct {
	// MaxKeys caps the denials remembered; when full, a new denial replaces
	// an expired one or is not remembered. Default 65,536 (a few MB).
	MaxKeys int
	// Now is the clock. Default time.Now (monotonic).
	Now func() time.Time
	// Invalidator, if set, is followed from NewDenied until Close: the
	// denials of the keys it names are forgotten, and every denial when it
	// says all, so that a refund or reset done through another instance
	// (or anything else sharing the store) frees the key here too, within
	// one announcement's delivery. Set it to the store that several
	// instances share (the Redis store, which implements
	// stack.Invalidator), whatever is between it and the cache (names are
	// Op.Key's, which stores in between must pass unchanged). Nil: only
	// the ops that go through this cache forget denials.
	Invalidator stack.Invalidator
}

// DefaultDeniedKeys is the default DeniedOptions.MaxKeys.
const DefaultDeniedKeys = 1 << 16

// Denied is a sluice.Store in front of another that remembers denials: once
// an op on a key is denied with RetryAfter r, the same key, limit and cost
// is denied from memory, without calling the next store, until r has
// passed (for fixed_window, whose RetryAfter is the window's end whatever
// the cost, so is any larger cost the limit can admit). The deadline is
// measured from before the call that was denied, so it never outlasts the
// store's own answer.
//
// It changes no decision, and answers the RetryAfter the next store would,
// when the next store's capacity for a key only comes back with time: a
// denial then holds for exactly RetryAfter, whatever else happens. That is
// true of every algorithm but concurrency (a release frees a slot early;
// never cached) as long as nothing gives quota back early: a Redis Cluster
// refund of a cross-slot batch, or an operator's reset of a key done
// elsewhere (Forget it, or set DeniedOptions.Invalidator so that refunds
// and resets done through any instance reach every cache). Only a denial
// whose RetryAfter is exact is remembered: not a sliding_log denial whose
// RetryAfter is its ResetAfter (past algorithm.ExactRetryUnits units to
// leave, the store answers when the whole log has left, which may be late).
// A larger cost is not answered from a smaller one's denial (but for
// fixed_window): its RetryAfter is later, by an amount only the store's
// state tells. Charges, refunds and resets (sluice.Action) that go through
// the cache always reach the next store; each forgets the key's denial (a
// charge moves its RetryAfter later), and no denial decided while a refund
// or reset was under way (here, or announced by the Invalidator) is
// remembered. docs/stores.md states where the cache is on by default.
//
// A cached denial's Result is the store's, with RetryAfter and ResetAfter
// shortened by the time passed; Remaining is as of the denial. Denied is
// safe for concurrent use.
type Denied struct {
	next    sluice.Store
	now     func() int64
	seed    maphash.Seed
	perSh   int
	shards  [numShards]dshard
	hits    atomic.Uint64
	stored  atomic.Uint64
	entries atomic.Int64
	// gives counts refunds and resets passing through, twice each (before
	// and after the next store applies them), and invalidations heard:
	// a Take that saw it change may have been decided on the state before,
	// and remembers nothing.
	gives atomic.Uint64
	// invalidated counts keys forgotten on the Invalidator's word, and
	// flushes the times it said all.
	invalidated atomic.Uint64
	flushes     atomic.Uint64
	// stop ends following the Invalidator; done is closed once it ended.
	stop     context.CancelFunc
	done     chan struct{}
	closeOne sync.Once
}

type dshard struct {
	mu sync.Mutex
	m  map[entryKey]denial
}

type denial struct {
	cost  int64 // denied at this cost (see covers)
	until int64 // µs on the local clock
	res   sluice.Result
}

// DeniedStats are counters of a Denied cache.
type DeniedStats struct {
	// Hits counts ops answered from the cache.
	Hits uint64
	// Stored counts denials remembered.
	Stored uint64
	// Keys is the number of denials held now (expired ones included until
	// they are replaced or looked up).
	Keys int
	// Invalidated counts keys the DeniedOptions.Invalidator named (whether
	// or not a denial of theirs was held).
	Invalidated uint64
	// Flushes counts the times the Invalidator said to drop everything
	// (at the start, and when its announcements may have been missed).
	Flushes uint64
}

// NewDenied returns a Denied cache in front of next.
func NewDenied(next sluice.Store, opts DeniedOptions) *Denied {
	d := &Denied{next: next, seed: maphash.MakeSeed()}
	if opts.Now != nil {
		now := opts.Now
		d.now = func() int64 { return now().UnixMicro() }
	} else {
		base := time.Now()
		d.now = func() int64 { return int64(time.Since(base) / time.Microsecond) }
	}
	n := opts.MaxKeys
	if n <= 0 {
		n = DefaultDeniedKeys
	}
	d.perSh = max(1, n/numShards)
	for i := range d.shards {
		d.shards[i].m = map[entryKey]denial{}
	}
	if inv := opts.Invalidator; inv != nil {
		ctx, cancel := context.WithCancel(context.Background())
		d.stop, d.done = cancel, make(chan struct{})
		go func() {
			defer close(d.done)
			// It returns when ctx ends or the store is closed: either
			// way nothing more can be heard.
			_ = inv.Invalidations(ctx, d.invalidate)
		}()
	}
	return d
}

// Close stops following DeniedOptions.Invalidator, if set, and waits until
// it stopped. The cache still works after, hearing nothing more (so it
// should no longer be used in a fleet). Close is idempotent.
func (d *Denied) Close() error {
	d.closeOne.Do(func() {
		if d.stop != nil {
			d.stop()
			<-d.done
		}
	})
	return nil
}

// invalidate is the Invalidator's callback: it forgets the denials of keys,
// or all of them. The generation moves first, so that a denial decided
// before the announcement but stored after it is not remembered (store
// checks it under the shard's lock, which forgetting takes after).
func (d *Denied) invalidate(keys []string, all bool) {
	d.gives.Add(1)
	if all {
		d.flushes.Add(1)
		for i := range d.shards {
			sh := &d.shards[i]
			sh.mu.Lock()
			d.entries.Add(-int64(len(sh.m)))
			clear(sh.m)
			sh.mu.Unlock()
		}
		return
	}
	d.invalidated.Add(uint64(len(keys)))
	for _, k := range keys {
		d.Forget(k)
	}
}

// Stats returns the cache's counters.
func (d *Denied) Stats() DeniedStats {
	return DeniedStats{Hits: d.hits.Load(), Stored: d.stored.Load(), Keys: int(d.entries.Load()),
		Invalidated: d.invalidated.Load(), Flushes: d.flushes.Load()}
}

// Next returns the store behind the cache.
func (d *Denied) Next() sluice.Store { return d.next }

func (d *Denied) shard(k entryKey) *dshard {
	return &d.shards[maphash.String(d.seed, k.key)%numShards]
}

// cacheable reports whether a denial of op may be remembered and reused.
// Not a reservation's (stack.Paired): the same op is a settle, never
// denied, once its record holds the reservation.
func cacheable(op *sluice.Op) bool {
	return op.Action == sluice.Take && op.Cost > 0 && !op.Release && op.Limit.Algorithm != sluice.Concurrency && !stack.Paired(op)
}

// exactRetry reports whether r, a denial of op, says exactly when op fits:
// not for sliding_log when r.RetryAfter is its ResetAfter, which it is
// when more than algorithm.ExactRetryUnits units must leave (and the store
// answers when the whole log has left, maybe late).
func exactRetry(op *sluice.Op, r *sluice.Result) bool {
	return op.Limit.Algorithm != sluice.SlidingLog || r.RetryAfter < r.ResetAfter
}

// covers reports whether den, a denial of op's key and limit, is the
// store's answer to op too: at the same cost; for fixed_window, whose
// RetryAfter is the window's end whatever the cost, at any larger cost the
// limit can admit (a larger one is sluice.ReasonCostTooHigh).
func (den *denial) covers(op *sluice.Op) bool {
	if op.Cost == den.cost {
		return true
	}
	return op.Limit.Algorithm == sluice.FixedWindow && op.Cost > den.cost && op.Cost <= stack.Capacity(op.Limit)
}

// gives reports whether op may give quota back early.
func gives(op *sluice.Op) bool {
	return op.Action == sluice.Refund || op.Action == sluice.Reset
}

// Forget drops any remembered denial of key (under every limit), for
// example after an operator reset it.
func (d *Denied) Forget(key string) {
	sh := d.shard(entryKey{key: key})
	sh.mu.Lock()
	for k := range sh.m {
		if k.key == key {
			delete(sh.m, k)
			d.entries.Add(-1)
		}
	}
	sh.mu.Unlock()
}

// lookup returns the remembered denial of op, if it still holds at now.
func (d *Denied) lookup(op *sluice.Op, now int64) (sluice.Result, bool) {
	if !cacheable(op) {
		return sluice.Result{}, false
	}
	k := entryKey{op.Key, op.Limit}
	sh := d.shard(k)
	sh.mu.Lock()
	den, ok := sh.m[k]
	if ok && now >= den.until {
		delete(sh.m, k)
		d.entries.Add(-1)
		ok = false
	}
	sh.mu.Unlock()
	if !ok || !den.covers(op) {
		return sluice.Result{}, false
	}
	r := den.res
	left := time.Duration(den.until-now) * time.Microsecond
	r.ResetAfter = max(r.ResetAfter-(r.RetryAfter-left), left)
	r.RetryAfter = left
	r.At = 0 // decided here, from memory, by no store clock
	return r, true
}

// Take implements sluice.Store.
func (d *Denied) Take(ctx context.Context, ops []sluice.Op, results []sluice.Result) error {
	if len(results) != len(ops) {
		return d.next.Take(ctx, ops, results) // the next store names the error
	}
	start := d.now()
	hits := 0
	for i := range ops {
		r, ok := d.lookup(&ops[i], start)
		if !ok {
			break
		}
		results[i] = r
		hits++
	}
	if hits == len(ops) {
		d.hits.Add(uint64(hits))
		return nil
	}
	// A partial hit goes to the store whole: the other ops' own verdicts
	// at their costs are only known there (a look would report them
	// allowed).
	giving, settling := false, false
	for i := range ops {
		giving = giving || gives(&ops[i])
		settling = settling || ops[i].Action != sluice.Take
	}
	if giving {
		d.gives.Add(1)
	}
	gen := d.gives.Load()
	err := d.next.Take(ctx, ops, results)
	if giving {
		d.gives.Add(1)
	}
	if settling {
		// A refund or reset frees the key; a charge moves a denial's
		// RetryAfter later (what the cache holds would be early).
		for i := range ops {
			if ops[i].Action != sluice.Take {
				d.forget(entryKey{ops[i].Key, ops[i].Limit})
			}
		}
	}
	if err != nil || settling {
		return err
	}
	for i := range ops {
		r := &results[i]
		if r.Allowed || r.Reason != sluice.ReasonLimited || r.RetryAfter <= 0 || !cacheable(&ops[i]) || !exactRetry(&ops[i], r) || dupKey(ops, i) {
			continue
		}
		d.store(&ops[i], *r, start, gen)
	}
	return nil
}

// forget drops the remembered denial of k, if any.
func (d *Denied) forget(k entryKey) {
	sh := d.shard(k)
	sh.mu.Lock()
	if _, ok := sh.m[k]; ok {
		delete(sh.m, k)
		d.entries.Add(-1)
	}
	sh.mu.Unlock()
}

// dupKey reports whether another op of the batch uses op i's key: its
// denial may then be due to the batch itself, not to the key's state.
func dupKey(ops []sluice.Op, i int) bool {
	for j := range ops {
		if j != i && ops[j].Key == ops[i].Key {
			return true
		}
	}
	return false
}

// store remembers the denial r of op, decided by a call that started at
// start with d.gives at gen: unless a refund or reset ran meanwhile (checked
// under the shard's lock, which forget takes after counting, so the two
// cannot cross).
func (d *Denied) store(op *sluice.Op, r sluice.Result, start int64, gen uint64) {
	k := entryKey{op.Key, op.Limit}
	den := denial{cost: op.Cost, until: start + r.RetryAfter.Microseconds(), res: r}
	sh := d.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if d.gives.Load() != gen {
		return
	}
	if old, ok := sh.m[k]; ok {
		if old.until >= den.until && old.covers(op) {
			return // the old denial answers this op already, as long
		}
		sh.m[k] = den
		d.stored.Add(1)
		return
	}
	if len(sh.m) >= d.perSh {
		evicted := false
		for ok, old := range sh.m {
			if old.until <= start {
				delete(sh.m, ok)
				d.entries.Add(-1)
				evicted = true
				break
			}
		}
		if !evicted {
			return
		}
	}
	sh.m[k] = den
	d.entries.Add(1)
	d.stored.Add(1)
}
