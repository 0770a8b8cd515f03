// Package hybrid is a sluice.Store that decides most hits locally, from
// allotments of quota leased from a global store (store/redis), and asks
// the global store only near the limit, when an allotment runs out, and for
// what it cannot decide alone.
//
// # How a key is decided
//
// Each instance keeps, per key, an allotment: units already counted against
// the key in the global store (one atomic script, stack.Allotter), which it
// spends locally with no round trip. An allotment is sized from the key's
// observed local rate (enough for Options.Horizon), capped at 1/Split of
// the quota that stands above a reserve (Keep), and leased again in the
// background before it runs out. Once the global quota left is at or below
// the reserve, no allotment is granted and, once the units already held are
// spent (the global store counted them when it granted them), every hit of
// the key is decided by the global store itself, one by one, exactly as
// with placement global.
//
// # Cold keys
//
// A lease pays only when its units are spent on several hits: for a key hit
// a few times a minute, each hit would lease (and give back or void) an
// allotment of its own, costing the global store more than deciding the
// hit there. So a key too cold to earn an allotment is decided by the
// global store's Take (its batched, coalesced path, exactly as placement
// global), never by a lease of a single unit. Too cold: the key was seen
// fewer than 4 times, or its observed rate (the mean gap between its hits,
// each new gap weighing a quarter, and at least the time since its last
// hit) would make fewer than 2 hits over the span an allotment could be
// spent, which is Options.Horizon, at most Options.Lease and the limit's
// window for the bucket algorithms (store/redis voids a bucket allotment
// after a window) and at most what is left of the window for
// fixed_window. At the defaults (Horizon 10s), with a window of 10s or
// more, a key hit less often than every 5s is cold; with a per-second
// limit, one hit less often than every 500ms. A key that leases asks for
// the hits its gap (later, its rate) makes in the span, plus one.
// Why 2: Redis pays mostly per script call (about 50µs of its CPU per
// EVALSHA on the bench machine, whatever the one to three ops it carries),
// and at these rates the batcher keeps a call in flight whether or not a
// few keys lease; a lease costs Redis one op in a call that runs anyway,
// and takes at least as many ops out of Redis. Measured with global and
// hybrid side by side (BENCHMARKS.md, "Hybrid: Redis cost per decision"),
// thresholds of 2, 4 and 8 cost 0.92-0.97x, 0.94-0.99x and 0.95-1.004x
// global's Redis CPU on users seen every 5s, and 0.55-0.59x, 0.57-0.59x
// and 0.59-0.62x on the Zipf stream. A key that
// warms up leases from its next hit; one that cools spends what it holds
// and is then decided globally. Stats.Cold counts the ops decided so.
//
// # Bounds (see also docs/stores.md, "Placement")
//
//   - fixed_window: never admits more than the quota in any window. An
//     allotment is a reservation inside the current window, taken before it
//     is spent and void when the window ends (measured from when the lease
//     was sent, so a local clock running ahead or behind Redis changes
//     nothing). The cost is under-admission: units reserved by one instance
//     and not spent, at most the allotments outstanding, returned when an
//     instance goes idle or closes, and at the latest when the window ends
//     (a killed instance's reservation ends with the window).
//   - gcra and token_bucket (decided as gcra): in any interval, admissions
//     are at most what an exact bucket admits plus the units of allotments
//     outstanding at the start of the interval (tokens taken from the
//     bucket earlier and spent later). Each allotment is at most
//     1/Split of the tokens above Keep when granted, and void after
//     Options.Lease.
//   - Other algorithms are refused (ErrUnsupported): leaky_bucket's Delay,
//     sliding windows and logs, and concurrency's releases need the global
//     state per hit.
//
// # Charge, refund and reset
//
// A batch holding an op whose sluice.Action is Charge, Refund or Reset is
// decided by the global store as a whole (all-or-nothing there), never
// from allotments. A charge or refund leaves the key's allotment as it is
// (its units were taken from the global quota before, so spending them
// stays within the bounds above) and refreshes the key's estimate of what
// the global store has left; once the allotment is spent, the next lease
// sees the charge (a key in debt is granted nothing and decided globally).
// A reset voids the key's allotment (its units belonged to the state the
// reset forgot: they are counted in Stats.Voided, never given back, for
// given back to the fresh key they would be admitted on top of its quota),
// so the next hit leases from the fresh key. A reset done elsewhere (through
// another instance sharing the global store) voids it too, once
// Options.Resets announces it; until then, one Pub/Sub delivery with the
// Redis store, this instance may still spend what it held. A grant on its
// way when the key's reset is heard (here or announced) may be of the old
// state: it is voided on arrival, erring on the side of admitting less (if
// it was of the fresh state, its units stay counted there unspent until
// the window ends or the bucket refills). When Options.Resets says
// announcements may have been missed, every allotment is voided the same
// way. What a reset cannot reach: an idle key's give-back (Sweep, Close)
// already on its way when the reset runs lands on the fresh key, at most
// the units that instance held, once. Keys lists the global store's keys
// when it is a stack.KeyLister.
//
// # Failure
//
// When the global store fails, each instance keeps deciding within the
// allotments it holds; a hit it cannot decide from them returns the global
// store's error, so the caller's failure mode applies.
package hybrid

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/stack"
)

// ErrUnsupported: the op's algorithm cannot be decided from allotments.
var ErrUnsupported = errors.New("hybrid: algorithm not supported (want fixed_window, gcra or token_bucket)")

// Supported reports whether a can be placed in a hybrid store.
func Supported(a sluice.Algorithm) bool {
	return a == sluice.FixedWindow || a == sluice.GCRA || a == sluice.TokenBucket
}

// Defaults of Options.
const (
	DefaultHorizon  = 10 * time.Second
	DefaultSplit    = 4
	DefaultKeep     = 0.1
	DefaultMaxKeys  = 1 << 20
	DefaultIdle     = 30 * time.Second
	DefaultBackoff  = time.Second
	defaultInitial  = 8   // the first allotment of a key, at least…
	initialShare    = 100 // …or 1/initialShare of the limit's capacity
	refillFraction  = 4   // refill when fewer than 1/refillFraction of the horizon's units are held
	maxAllotFactor  = 1   // an allotment never exceeds the limit's capacity
	numShards       = 64
	syncHysteresis  = 2 // leave global decisions when remaining > syncHysteresis × keep
	coldHits        = 2 // a key expected to be hit fewer times than this in an allotment's life is too cold to lease
	minHits         = 4 // nor is a key seen fewer times than this
	sweepEveryTakes = 1 << 12
)

// Options configure a Store. The zero value is usable.
type Options struct {
	// Now is the local clock. Default time.Now (monotonic). Only durations
	// on it matter: windows and leases come from the global store.
	Now func() time.Time
	// Horizon is how long an allotment should last at the key's observed
	// rate. Longer means fewer global calls and larger outstanding
	// allotments. Default 10s.
	Horizon time.Duration
	// Lease is how long a gcra or token_bucket allotment may be spent
	// before its unspent units are void. Default Horizon. (A fixed_window
	// allotment is void when its window ends.)
	Lease time.Duration
	// Split caps one allotment at 1/Split of the quota standing above the
	// reserve. Default 4.
	Split int64
	// Keep is the reserve, as a fraction of the limit's capacity (rounded
	// up, at least 1): once no more than this is left globally, hits are
	// decided by the global store one by one. Default 0.1.
	Keep float64
	// MaxKeys caps the keys an instance keeps allotments for; a key beyond
	// it is decided by the global store. Default 1,048,576.
	MaxKeys int
	// Idle: a key unused this long gives back its allotment and is
	// forgotten. Default 30s.
	Idle time.Duration
	// OnGrant, if set, is called with a key's name after a grant of at
	// least one unit for it was applied, outside the store's locks (from
	// the goroutine that leased: it must not block). A layer above that
	// remembers the key's denials (the denied-key cache) should forget
	// them: the key can admit from its allotment again, and a remembered
	// denial would strand the units until it expires.
	OnGrant func(key string)
	// Resets, if set, is followed from New until Close: the allotments of
	// the keys it names are voided, and every allotment when it says all
	// (announcements may have been missed), so that a reset done through
	// another instance (or anything else sharing the global store) stops
	// this one spending units taken from the key before the reset. Voided
	// units are not given back: the counter they were taken from is gone,
	// and giving them back to the fresh one would let the fleet admit more
	// than the limit. Set it to the global store several instances share
	// (the Redis store implements stack.ResetAnnouncer; names are
	// Op.Key's, which stores in between must pass unchanged). Nil: only
	// resets through this store void its allotments.
	Resets stack.ResetAnnouncer
}

// Stats are counters of a Store since New.
type Stats struct {
	// Local counts ops decided from allotments, with no global call.
	Local uint64
	// Global counts ops sent to the global store's Take.
	Global uint64
	// Cold counts the ops among them whose key was too cold to lease
	// (see "Cold keys" in the package documentation).
	Cold uint64
	// Allots counts allotment requests sent; Granted the units they gave.
	Allots, Granted uint64
	// GivenBack counts units handed back unspent; Voided units that expired
	// unspent or that a reset voided (and grants voided on arrival because
	// their key was reset while they were on their way).
	GivenBack, Voided uint64
	// Resets counts the keys with local state whose allotment a reset
	// voided (whether or not units were held): once per Reset op through
	// this store, and once per key and limit Options.Resets named. ResetFlushes counts the times Options.Resets said all
	// (at the start, and when announcements may have been missed), each
	// voiding every allotment.
	Resets, ResetFlushes uint64
	// Keys is the number of keys with local state.
	Keys int
}

// Store decides from allotments of a global store. It is safe for
// concurrent use. Close gives back what it holds.
type Store struct {
	g       stack.Allotter
	now     func() int64
	wall    func() int64 // this host's clock, µs since the Unix epoch (localAt)
	horizon int64        // µs
	// rateSpan is the shortest span a rate is measured over: Horizon/20,
	// at most a second.
	rateSpan int64
	lease    int64 // µs
	split    int64
	keep     float64
	maxKeys  int
	idle     int64
	seed     maphash.Seed
	shards   [numShards]shard
	keys     atomic.Int64
	takes    atomic.Uint64
	sweepMu  sync.Mutex
	wg       sync.WaitGroup
	closed   atomic.Bool

	local, global, cold, allots, granted, givenBack, voided atomic.Uint64
	resets, resetFlushes                                    atomic.Uint64

	// resetGen counts the resets voiding allotments (of a key or all):
	// a grant whose lease was sent when it was lower than its entry's
	// voidGen, or than allGen, is from before a reset and is voided on
	// arrival.
	resetGen, allGen atomic.Uint64
	// stop ends following Options.Resets; done is closed once it ended.
	stop context.CancelFunc
	done chan struct{}

	onGrant func(key string)

	// settled, if set (tests), is called under k's shard lock when a
	// grant that the global store answered without error reaches its
	// key: applied to the entry's held units, voided, or (the entry gone)
	// about to be given back or voided. From then on the units are in
	// the entry or out of reach; before, they are in flight.
	settled func(k entryKey, granted int64)
}

type shard struct {
	mu sync.Mutex
	m  map[entryKey]*entry
}

type entryKey struct {
	key   string
	limit sluice.Limit
}

// entry is one key's local state; every field is guarded by its shard's mu.
type entry struct {
	held     int64 // unspent allotted units, prev among them
	deadline int64 // local µs after which held is void
	// prev of the units held (bucket algorithms only) came from earlier
	// grants than the last one and are void from prevDeadline (≤
	// deadline) on: a grant that lands while units are held does not
	// extend their life (a bucket's grants all carry epoch 0, so a reset
	// whose announcement is lost shows in nothing but the deadline).
	// Spends take prev first.
	prev         int64
	prevDeadline int64
	epoch        int64
	// atLo and atHi bound a local spend's instant on the store's clock:
	// between now+atLo and now+atHi (local µs now), both inside the window
	// of the last fixed_window grant (see localAt); atSet says they are
	// known (never for the bucket algorithms: their grants carry no
	// instant).
	atLo, atHi int64
	atSet      bool
	remaining  int64 // global remaining at the last answer (an estimate)
	resetAt    int64 // local µs when the global quota is whole again (estimate)
	spent      int64 // units spent locally since since
	since      int64
	rate       float64 // units per µs
	global     bool    // near the limit: decide every hit globally
	refilling  bool
	need       int64 // the cost that did not fit, for the next allotment
	backoff    int64 // no allotment request before this (the global store failed)
	last       int64
	// The key's demand, local or global, for the cold test: hits seen
	// (saturating at minHits), the local µs of the last, and the mean gap
	// between hits (µs, each new gap weighing a quarter).
	hits  int8
	hitAt int64
	gap   float64
	// voidGen is resetGen when a reset last voided the key's allotment.
	voidGen uint64
}

// New returns a Store over the global store g.
func New(g stack.Allotter, opts Options) (*Store, error) {
	if g == nil {
		return nil, errors.New("hybrid: nil global store")
	}
	if opts.Horizon < 0 || opts.Lease < 0 || opts.Split < 0 || opts.Keep < 0 || opts.Keep >= 1 || opts.MaxKeys < 0 || opts.Idle < 0 {
		return nil, fmt.Errorf("hybrid: invalid options (horizon %v, lease %v, split %d, keep %v, max keys %d, idle %v)",
			opts.Horizon, opts.Lease, opts.Split, opts.Keep, opts.MaxKeys, opts.Idle)
	}
	s := &Store{g: g, seed: maphash.MakeSeed(), onGrant: opts.OnGrant}
	if opts.Now != nil {
		now := opts.Now
		s.now = func() int64 { return now().UnixMicro() }
		s.wall = s.now
	} else {
		base := time.Now()
		s.now = func() int64 { return int64(time.Since(base) / time.Microsecond) }
		s.wall = func() int64 { return time.Now().UnixMicro() }
	}
	s.horizon = durOr(opts.Horizon, DefaultHorizon)
	s.rateSpan = min(s.horizon/20, time.Second.Microseconds())
	s.lease = durOr(opts.Lease, time.Duration(s.horizon)*time.Microsecond)
	s.idle = durOr(opts.Idle, DefaultIdle)
	s.split = opts.Split
	if s.split == 0 {
		s.split = DefaultSplit
	}
	s.keep = opts.Keep
	if s.keep == 0 {
		s.keep = DefaultKeep
	}
	s.maxKeys = opts.MaxKeys
	if s.maxKeys == 0 {
		s.maxKeys = DefaultMaxKeys
	}
	for i := range s.shards {
		s.shards[i].m = map[entryKey]*entry{}
	}
	if ra := opts.Resets; ra != nil {
		ctx, cancel := context.WithCancel(context.Background())
		s.stop, s.done = cancel, make(chan struct{})
		go func() {
			defer close(s.done)
			// It returns when ctx ends or the store is closed: either way
			// nothing more can be heard.
			_ = ra.Resets(ctx, s.heardResets)
		}()
	}
	return s, nil
}

func durOr(d, def time.Duration) int64 {
	if d == 0 {
		d = def
	}
	return max(d.Microseconds(), 1)
}

// Stats returns the Store's counters.
func (s *Store) Stats() Stats {
	return Stats{
		Local: s.local.Load(), Global: s.global.Load(), Cold: s.cold.Load(),
		Allots: s.allots.Load(), Granted: s.granted.Load(),
		GivenBack: s.givenBack.Load(), Voided: s.voided.Load(),
		Resets: s.resets.Load(), ResetFlushes: s.resetFlushes.Load(),
		Keys: int(s.keys.Load()),
	}
}

// Held returns the units this store holds now in allotments that may
// still be spent (granted, not spent, given back or voided, and before
// their deadline), summed over keys and limits, and the number of keys
// holding some: the "units of allotments outstanding" of the bounds in the
// package documentation, for this instance. It visits every key (the
// shards one at a time, each under its lock), so it is for a metrics
// scrape, not for the hot path.
func (s *Store) Held() (units int64, keys int) {
	now := s.now()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, e := range sh.m {
			if u := e.live(now); u > 0 {
				units += u
				keys++
			}
		}
		sh.mu.Unlock()
	}
	return units, keys
}

// keepOf is the reserve of limit l.
func (s *Store) keepOf(l sluice.Limit) int64 {
	c := stack.Capacity(l)
	k := int64(float64(c)*s.keep + 0.999999)
	return max(k, 1)
}

// normalize returns op as the store decides it: token_bucket as gcra (the
// same decisions, and gcra's state can be allotted).
func normalize(op sluice.Op) sluice.Op {
	if op.Limit.Algorithm == sluice.TokenBucket {
		op.Limit.Algorithm = sluice.GCRA
	}
	return op
}

func (s *Store) shardIndex(k entryKey) int {
	return int(maphash.String(s.seed, k.key) % numShards)
}

func (s *Store) shardOf(k entryKey) *shard { return &s.shards[s.shardIndex(k)] }

// lookup returns k's entry, creating it when create is set and the cap
// allows (nil otherwise). The shard's mu must be held.
func (s *Store) lookup(sh *shard, k entryKey, create bool, now int64) *entry {
	if e := sh.m[k]; e != nil {
		return e
	}
	if !create || s.keys.Load() >= int64(s.maxKeys) {
		return nil
	}
	e := &entry{since: now, last: now}
	sh.m[k] = e
	s.keys.Add(1)
	return e
}

// plan is what Take found for one op under the locks.
type plan struct {
	k  entryKey
	si int // shard index
	sh *shard
	e  *entry
}

// Take implements sluice.Store: the batch is decided locally when every op
// fits in its key's allotment, else by the global store (all-or-nothing
// either way). ops must use supported algorithms (Supported).
func (s *Store) Take(ctx context.Context, ops []sluice.Op, results []sluice.Result) error {
	if len(results) != len(ops) {
		return fmt.Errorf("hybrid: %d ops, %d results: %w", len(ops), len(results), stack.ErrResultsLength)
	}
	if len(ops) == 0 {
		return nil
	}
	for i := range ops {
		if err := stack.CheckOp(&ops[i]); err != nil {
			return fmt.Errorf("hybrid: %w", err)
		}
		if !Supported(ops[i].Limit.Algorithm) {
			return fmt.Errorf("hybrid: op %q: %v: %w", ops[i].Key, ops[i].Limit.Algorithm, ErrUnsupported)
		}
		if stack.Paired(&ops[i]) {
			return fmt.Errorf("hybrid: op %q: a reservation (its record is the global store's): %w", ops[i].Key, ErrUnsupported)
		}
	}
	if s.takes.Add(1)%sweepEveryTakes == 0 {
		s.maybeSweep()
	}
	var planBuf [4]plan
	plans := planBuf[:0]
	for i := range ops {
		k := entryKey{ops[i].Key, normalize(ops[i]).Limit}
		si := s.shardIndex(k)
		plans = append(plans, plan{k: k, si: si, sh: &s.shards[si]})
	}
	now := s.now()
	if settles(ops) {
		return s.settle(ctx, ops, plans, results, now)
	}
	ok, need := s.tryLocal(ops, plans, results, now, true)
	if ok {
		return nil
	}
	if len(need) > 0 {
		s.allot(ctx, need, now)
		if ok, _ = s.tryLocal(ops, plans, results, s.now(), false); ok {
			return nil
		}
	}
	return s.takeGlobal(ctx, ops, plans, results, now)
}

// settles reports whether ops hold a Charge, Refund or Reset.
func settles(ops []sluice.Op) bool {
	for i := range ops {
		if ops[i].Action != sluice.Take {
			return true
		}
	}
	return false
}

// settle decides a batch with charges, refunds or resets in the global
// store, dropping the local state of each key reset before the call (so
// no hit spends its old allotment meanwhile) and after it (so no grant
// that raced with the call survives).
func (s *Store) settle(ctx context.Context, ops []sluice.Op, plans []plan, results []sluice.Result, now int64) error {
	s.dropReset(ops, plans, true)
	err := s.takeGlobal(ctx, ops, plans, results, now)
	s.dropReset(ops, plans, false)
	return err
}

// dropReset voids the allotment of every key ops reset (voidReset),
// counting them in Stats.Resets if count is set.
func (s *Store) dropReset(ops []sluice.Op, plans []plan, count bool) {
	for i := range ops {
		if ops[i].Action != sluice.Reset {
			continue
		}
		p := &plans[i]
		g := s.resetGen.Add(1)
		p.sh.mu.Lock()
		if e := p.sh.m[p.k]; e != nil {
			s.voidReset(e, g)
			if count {
				s.resets.Add(1)
			}
		}
		p.sh.mu.Unlock()
	}
}

// voidReset voids e's allotment, for a reset of its key numbered g
// (resetGen): the units held are dropped, not given back (the counter they
// were taken from is gone), a grant on its way when g was numbered will be
// dropped on arrival, and the key, fresh in the global store, may lease
// again on its next hit. Its demand (hits, rate) is kept: the traffic did
// not change. mu of e's shard must be held.
func (s *Store) voidReset(e *entry, g uint64) {
	if e.held > 0 {
		s.voided.Add(uint64(e.held))
	}
	e.held, e.prev = 0, 0
	e.voidGen = g
	e.global = false
}

// heardResets is the callback of Options.Resets: it voids the allotments
// of keys (under every limit), or every allotment when all is set.
func (s *Store) heardResets(keys []string, all bool) {
	g := s.resetGen.Add(1)
	if all {
		s.resetFlushes.Add(1)
		// allGen first: a grant applied from now on, whose lease was
		// sent before, is voided (allot checks it under the shard's lock,
		// which the loop below takes after).
		s.allGen.Store(g)
		for i := range s.shards {
			sh := &s.shards[i]
			sh.mu.Lock()
			for _, e := range sh.m {
				if e.held > 0 {
					s.voided.Add(uint64(e.held))
				}
				e.held, e.prev = 0, 0
			}
			sh.mu.Unlock()
		}
		return
	}
	// One pass over each shard that holds a named key, whatever the
	// number of keys (a tenant's reset names many).
	var named [numShards]map[string]struct{}
	for _, k := range keys {
		si := s.shardIndex(entryKey{key: k})
		if named[si] == nil {
			named[si] = map[string]struct{}{}
		}
		named[si][k] = struct{}{}
	}
	for si := range named {
		if named[si] == nil {
			continue
		}
		sh := &s.shards[si]
		sh.mu.Lock()
		for k, e := range sh.m {
			if _, ok := named[si][k.key]; ok {
				s.voidReset(e, g)
				s.resets.Add(1)
			}
		}
		sh.mu.Unlock()
	}
}

// Keys implements stack.KeyLister by asking the global store, which holds
// every key's state; it fails when the global store lists no keys.
func (s *Store) Keys(ctx context.Context, prefix string, max int) ([]string, bool, error) {
	kl, ok := s.g.(stack.KeyLister)
	if !ok {
		return nil, false, fmt.Errorf("hybrid: keys: the global store (%T) does not list keys", s.g)
	}
	return kl.Keys(ctx, prefix, max)
}

// lock locks the shards of plans in index order (so that batches cannot
// deadlock); unlock releases them.
func (s *Store) lock(plans []plan) {
	if len(plans) == 1 {
		plans[0].sh.mu.Lock()
		return
	}
	var buf [8]int
	for _, i := range shardSet(plans, buf[:0]) {
		s.shards[i].mu.Lock()
	}
}

func (s *Store) unlock(plans []plan) {
	if len(plans) == 1 {
		plans[0].sh.mu.Unlock()
		return
	}
	var buf [8]int
	for _, i := range shardSet(plans, buf[:0]) {
		s.shards[i].mu.Unlock()
	}
}

// shardSet appends the distinct shard indexes of plans to buf, sorted.
func shardSet(plans []plan, buf []int) []int {
	for i := range plans {
		buf = append(buf, plans[i].si)
	}
	slices.Sort(buf)
	return slices.Compact(buf)
}

// tryLocal decides the batch from allotments if every op fits. Otherwise it
// returns the keys that should ask for an allotment now (none too cold to
// lease). hit says this is the batch's first try: its hits count towards
// the keys' demand.
func (s *Store) tryLocal(ops []sluice.Op, plans []plan, results []sluice.Result, now int64, hit bool) (bool, []entryKey) {
	s.lock(plans)
	defer s.unlock(plans)
	fits := true
	var need []entryKey
	for i := range ops {
		p := &plans[i]
		p.e = s.lookup(p.sh, p.k, true, now)
		e := p.e
		if e == nil {
			fits = false
			continue
		}
		e.last = now
		if hit {
			e.hit(now)
		}
		s.voided.Add(uint64(e.expire(now)))
		// Units held are spent first even when the key is decided globally
		// (e.global: a lease was refused near the limit): they were taken
		// from the global quota already, and the global store, which counts
		// them as spent, would deny the hits they are for.
		if ops[i].Cost > e.held || e.deadline == 0 {
			// (deadline 0: never allotted; even a look has nothing to say)
			fits = false
			if hit && !e.global && s.tooCold(e, ops[i].Limit, now) {
				s.cold.Add(1)
				continue
			}
			// Only the first try leases: the second (after the lease) has
			// no one to send one, and a key marked refilling with no lease
			// on its way would never lease again (as after a grant voided
			// on arrival).
			if hit && !e.global && !e.refilling && now >= e.backoff && ops[i].Cost <= stack.Capacity(ops[i].Limit) {
				e.refilling = true
				e.need = ops[i].Cost - e.held
				need = append(need, p.k)
			}
		}
	}
	if !fits {
		return false, need
	}
	for i := range ops {
		e := plans[i].e
		c := ops[i].Cost
		e.prev -= min(e.prev, c)
		e.held -= c
		e.spent += c
		results[i] = sluice.Result{
			Allowed:    true,
			Limit:      stack.Capacity(ops[i].Limit),
			Remaining:  min(stack.Capacity(ops[i].Limit), max(e.remaining, 0)+e.held),
			ResetAfter: time.Duration(max(e.resetAt-now, 0)) * time.Microsecond,
			// At: see localAt.
			At: e.localAt(now, s.wall()),
		}
		if !e.global && !e.refilling && now >= e.backoff && !s.closed.Load() && e.held*refillFraction < s.want(e, ops[i].Limit, 0, now) &&
			!s.tooCold(e, ops[i].Limit, now) {
			e.refilling = true
			s.wg.Add(1)
			go s.refill(plans[i].k)
		}
	}
	s.local.Add(uint64(len(ops)))
	return true, nil
}

// localAt is the instant, on the store's clock (µs since the Unix epoch),
// of a local spend at local µs now, wall being this host's clock then. The
// grant was taken at the store's TIME g, after the lease was sent (local
// sent) and before its reply arrived (local arrived); so the spend's true
// instant lies in [g + (now − arrived), g + (now − sent)], and that
// interval lies in the grant's window (g ≥ the window's start, and now is
// before the deadline sent + TTL, so g + now − sent < g + TTL = the
// window's end). The host's clock is taken when it falls inside (on one
// host it is the store's own clock: the exact instant), else the nearer
// end: the spend is placed in the window its units were granted in,
// whatever the clocks read. 0 for the bucket algorithms. mu of e's shard
// must be held.
func (e *entry) localAt(now, wall int64) int64 {
	if !e.atSet {
		return 0
	}
	return min(max(wall, now+e.atLo), now+e.atHi)
}

// expire voids the units held whose deadline is past at now and returns
// how many. mu of e's shard must be held.
func (e *entry) expire(now int64) int64 {
	var void int64
	if e.prev > 0 && now >= e.prevDeadline {
		void, e.held, e.prev = e.prev, e.held-e.prev, 0
	}
	if e.held > 0 && now >= e.deadline {
		void += e.held
		e.held, e.prev = 0, 0
	}
	return void
}

// live is the units held that may still be spent at now (those expire
// would keep). mu of e's shard must be held.
func (e *entry) live(now int64) int64 {
	if now >= e.deadline {
		return 0
	}
	if e.prev > 0 && now >= e.prevDeadline {
		return e.held - e.prev
	}
	return e.held
}

// hit records a hit of the key at now, for tooCold.
func (e *entry) hit(now int64) {
	if e.hits > 0 {
		g := float64(max(now-e.hitAt, 0))
		if e.hits == 1 {
			e.gap = g
		} else {
			e.gap = 0.75*e.gap + 0.25*g
		}
	}
	e.hits = min(e.hits+1, minHits)
	e.hitAt = now
}

// span is how long an allotment of limit l leased at now could be spent:
// Horizon, at most Lease and the limit's window for a bucket (store/redis
// voids a bucket allotment after one window), at most what is left of the
// window for fixed_window (the whole window before the first lease). mu of
// e's shard must be held.
func (s *Store) span(e *entry, l sluice.Limit, now int64) int64 {
	if l.Algorithm != sluice.FixedWindow {
		return max(min(s.horizon, s.lease, l.Window.Microseconds()), 1)
	}
	left := l.Window.Microseconds()
	if e.deadline > now {
		left = e.deadline - now
	}
	return min(s.horizon, left)
}

// tooCold reports whether the key is too cold to earn an allotment: seen
// fewer than minHits times (a gap or two between hits is too little
// evidence: a key seen every 5s on average has two hits within 2s one time
// in three), or hit at a rate that, over the span an allotment could be
// spent, makes fewer than coldHits hits. A lease for such a key costs the
// global store at least what deciding its hits there does (a script call
// per lease, plus a give-back or void units), so its hits are decided by
// the global store's Take instead. mu of e's shard must be held.
func (s *Store) tooCold(e *entry, l sluice.Limit, now int64) bool {
	if e.hits < minHits {
		return true
	}
	// The gap since the last hit counts too: a key that went quiet is cold
	// before its next hit says so.
	gap := max(e.gap, float64(now-e.hitAt))
	return gap*coldHits > float64(s.span(e, l, now))
}

// rateOf is the key's observed local rate (units per µs): what was spent
// since the last allotment, blended with the rate before it while that
// span is short. mu of e's shard must be held.
func (s *Store) rateOf(e *entry, now int64) float64 {
	d := now - e.since
	if d < s.rateSpan || e.spent == 0 {
		// Too short to tell: a few hits within a millisecond are not a
		// rate of thousands a second.
		return e.rate
	}
	r := float64(e.spent) / float64(d)
	if e.rate == 0 || d >= s.horizon/refillFraction {
		return r
	}
	return (e.rate + r) / 2
}

// want is the allotment to ask for: the units the key's observed rate
// spends in Horizon, at least cost (and, while the rate is unknown, the
// larger of defaultInitial and 1% of the capacity: one lease then covers
// most keys' traffic in a window), at most the limit's capacity. mu of e's
// shard must be held.
func (s *Store) want(e *entry, l sluice.Limit, cost, now int64) int64 {
	w := max(int64(defaultInitial), stack.Capacity(l)/initialShare)
	if e.hits >= minHits && e.gap > 0 {
		// No rate measured yet, but the gap between hits says how many
		// hits the allotment's span holds: a lukewarm key gets no more.
		w = min(w, int64(float64(s.span(e, l, now))/e.gap)+1)
	}
	if r := s.rateOf(e, now); r > 0 {
		span := s.horizon
		if l.Algorithm == sluice.FixedWindow {
			// Units reserved past the window's end would be void: ask for
			// what the rate spends until then.
			left := l.Window.Microseconds()
			if e.deadline > now {
				left = e.deadline - now
			}
			span = min(span, left)
		}
		w = int64(r*float64(span)) + 1
	}
	w = max(w, cost)
	return min(w, stack.Capacity(l)*maxAllotFactor)
}

// refill leases a new allotment for k in the background.
func (s *Store) refill(k entryKey) {
	defer s.wg.Done()
	if s.closed.Load() {
		s.endRefill(k)
		return
	}
	s.allot(context.Background(), []entryKey{k}, s.now())
}

func (s *Store) endRefill(k entryKey) {
	sh := s.shardOf(k)
	sh.mu.Lock()
	if e := sh.m[k]; e != nil {
		e.refilling = false
	}
	sh.mu.Unlock()
}

// allot asks the global store for allotments of keys (whose entries have
// refilling set) and applies the grants.
func (s *Store) allot(ctx context.Context, keys []entryKey, now int64) {
	reqs := make([]stack.AllotRequest, len(keys))
	for i, k := range keys {
		sh := s.shardOf(k)
		sh.mu.Lock()
		w := max(int64(defaultInitial), stack.Capacity(k.limit)/initialShare)
		if e := sh.m[k]; e != nil {
			w = s.want(e, k.limit, e.need, now)
			e.need = 0
		}
		sh.mu.Unlock()
		reqs[i] = stack.AllotRequest{Key: k.key, Limit: k.limit, Want: w, Keep: s.keepOf(k.limit), Split: s.split}
	}
	out := make([]stack.Allotment, len(keys))
	// gen before the lease is sent: a reset heard after this may have run
	// in the global store before or after the grant was taken.
	gen := s.resetGen.Load()
	sent := s.now()
	s.allots.Add(uint64(len(reqs)))
	err := s.g.Allot(ctx, reqs, out)
	for i, k := range keys {
		sh := s.shardOf(k)
		sh.mu.Lock()
		e := sh.m[k]
		if err == nil && s.settled != nil {
			s.settled(k, out[i].Granted)
		}
		if e == nil { // swept meanwhile: nothing to apply a grant to
			sh.mu.Unlock()
			if err != nil || out[i].Granted == 0 {
				continue
			}
			if s.resetGen.Load() != gen {
				// A reset since the lease was sent may have been of this
				// key: giving the grant back could give the fresh counter
				// units taken from the old one.
				s.granted.Add(uint64(out[i].Granted))
				s.voided.Add(uint64(out[i].Granted))
				continue
			}
			s.giveBack(k, out[i])
			continue
		}
		e.refilling = false
		if err != nil {
			e.backoff = sent + DefaultBackoff.Microseconds()
			sh.mu.Unlock()
			continue
		}
		a := out[i]
		s.granted.Add(uint64(a.Granted))
		if e.voidGen > gen || s.allGen.Load() > gen {
			// The key was reset (or announcements missed) while the lease
			// was on its way: the grant may be of the state before the
			// reset. Dropping it errs on the side of admitting less (its
			// units, if taken from the fresh counter, stay counted until
			// the window or bucket frees them); the next hit leases again.
			s.voided.Add(uint64(a.Granted))
			sh.mu.Unlock()
			continue
		}
		deadline := sent + a.TTL.Microseconds()
		if k.limit.Algorithm != sluice.FixedWindow {
			deadline = sent + min(s.lease, a.TTL.Microseconds())
		}
		s.voided.Add(uint64(e.expire(sent)))
		if a.Epoch != e.epoch {
			// a new window: the old allotment is void
			s.voided.Add(uint64(e.held))
			e.held, e.prev = 0, 0
			e.epoch = a.Epoch
		}
		if e.held > 0 && k.limit.Algorithm != sluice.FixedWindow {
			// A bucket's units held keep the deadline they had: the
			// earliest of their grants', so none outlives its own lease.
			// (A fixed window's units all belong to the grant's epoch and
			// take the new deadline, sent + TTL, which is at most the
			// window's end: as internal/proof/model has it.)
			if e.prev == 0 {
				e.prevDeadline = e.deadline
			} else {
				e.prevDeadline = min(e.prevDeadline, e.deadline)
			}
			e.prev = e.held
		}
		e.held += a.Granted
		if a.Granted > 0 && k.limit.Algorithm == sluice.FixedWindow {
			// The script's TTL is the window's end less its TIME, and the
			// epoch the window's index: their difference is that TIME.
			g := (a.Epoch+1)*k.limit.Window.Microseconds() - a.TTL.Microseconds()
			e.atLo, e.atHi, e.atSet = g-s.now(), g-sent, true
		}
		if a.Granted > 0 && s.onGrant != nil {
			defer s.onGrant(k.key)
		}
		e.deadline = deadline
		e.remaining = a.Remaining
		e.resetAt = sent + a.ResetAfter.Microseconds()
		e.global = a.Granted == 0
		e.rate = s.rateOf(e, sent)
		if sent-e.since >= s.rateSpan {
			// (a shorter span says too little: keep counting over it, or a
			// hot key refilling faster than rateSpan never learns its rate)
			e.spent, e.since = 0, sent
		}
		sh.mu.Unlock()
	}
}

// giveBack hands an allotment back to the global store (best effort: a
// failure leaves the units to expire with their window or bucket).
func (s *Store) giveBack(k entryKey, a stack.Allotment) {
	req := []stack.AllotRequest{{Key: k.key, Limit: k.limit, Give: a.Granted, Epoch: a.Epoch, Keep: s.keepOf(k.limit), Split: s.split}}
	out := make([]stack.Allotment, 1)
	if s.g.Allot(context.Background(), req, out) == nil {
		s.givenBack.Add(uint64(a.Granted))
	}
}

// takeGlobal decides the batch in the global store and learns from the
// results whether its keys are near their limits.
func (s *Store) takeGlobal(ctx context.Context, ops []sluice.Op, plans []plan, results []sluice.Result, now int64) error {
	s.global.Add(uint64(len(ops)))
	norm := ops
	for i := range ops {
		if ops[i].Limit.Algorithm == sluice.TokenBucket {
			norm = make([]sluice.Op, len(ops))
			for j := range ops {
				norm[j] = normalize(ops[j])
			}
			break
		}
	}
	if err := s.g.Take(ctx, norm, results); err != nil {
		return err
	}
	for i := range ops {
		p := &plans[i]
		p.sh.mu.Lock()
		if e := p.sh.m[p.k]; e != nil {
			e.remaining = results[i].Remaining
			e.resetAt = now + results[i].ResetAfter.Microseconds()
			if e.global && results[i].Remaining > syncHysteresis*s.keepOf(p.k.limit) {
				e.global = false // far from the limit again: allot on the next hit
			}
		}
		p.sh.mu.Unlock()
	}
	return nil
}

// maybeSweep starts a sweep unless one runs.
func (s *Store) maybeSweep() {
	if !s.sweepMu.TryLock() {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.sweepMu.Unlock()
		s.Sweep(context.Background(), false)
	}()
}

// Sweep forgets keys idle for Options.Idle (all keys when all is set),
// giving back their unspent allotments in one global call. Take calls it
// now and then; Close calls it with all set.
func (s *Store) Sweep(ctx context.Context, all bool) {
	now := s.now()
	var reqs []stack.AllotRequest
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if !all && now-e.last < s.idle {
				continue
			}
			if e.refilling && !all {
				continue
			}
			s.voided.Add(uint64(e.expire(now)))
			if e.held > 0 {
				reqs = append(reqs, stack.AllotRequest{Key: k.key, Limit: k.limit, Give: e.held, Epoch: e.epoch, Keep: s.keepOf(k.limit), Split: s.split})
			}
			delete(sh.m, k)
			s.keys.Add(-1)
		}
		sh.mu.Unlock()
	}
	if len(reqs) == 0 {
		return
	}
	out := make([]stack.Allotment, len(reqs))
	if s.g.Allot(ctx, reqs, out) == nil {
		for _, r := range reqs {
			s.givenBack.Add(uint64(r.Give))
		}
	} else {
		for _, r := range reqs {
			s.voided.Add(uint64(r.Give))
		}
	}
}

// Close stops following Options.Resets, waits for background leases and
// gives back every unspent allotment. It does not close the global store. Takes after Close still
// work (they go to the global store once allotments are spent).
func (s *Store) Close() error {
	if s.closed.CompareAndSwap(false, true) {
		if s.stop != nil {
			s.stop()
			<-s.done
		}
		s.wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Sweep(ctx, true)
	}
	return nil
}
