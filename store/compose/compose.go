// Package compose builds the store stack that decides a request, once, from
// one Config: what `sluice serve`, `sluice proxy` and library users get.
//
// With Kind "memory" the stack is one in-process store (store/memory). With
// Kind "redis" it is, from the bottom:
//
//   - the Redis store (store/redis), or its stand-in while Redis cannot be
//     reached at start (Config.Background): ops fail with
//     sluice.ErrStoreUnavailable, so each limit's failure mode applies,
//     until a background dial succeeds; a Redis whose maxmemory-policy
//     evicts Sluice's keys is refused, even in the background, unless
//     Redis.AllowEviction; once connected, every node's policy and
//     evicted_keys are read every Config.MemoryWatch (Stack.Eviction);
//   - a hybrid store (store/hybrid) over it, for counters placed hybrid;
//   - the denied-key cache (hybrid.Denied) in front of each of the two,
//     per Config.Denied (by default on unless Redis is a Cluster),
//     following the Redis store's announcements of refunds and resets
//     (stack.Invalidator), so that one done through any instance frees
//     the key in every instance's cache;
//   - the hybrid store follows the announcements of resets
//     (stack.ResetAnnouncer), so that a reset through any instance voids
//     the allotments every instance holds of the key;
//   - an in-process store (store/memory) for counters placed local, which
//     is also the fallback of limits whose failure_mode is local
//     (Stack.Fallback);
//   - Placed, which routes each op by its key's placement byte
//     (stack.KeyHybrid, stack.KeyLocal) and keeps a batch across
//     placements all-or-nothing.
//
// The stack is a batch.Decider: the engine hands it a whole check in one
// call. Every layer passes the optional interfaces through: stack.KeyLister,
// stack.Allotter (where a layer can lease), stack.HealthReporter,
// stack.Invalidator, stack.ResetAnnouncer, stack.Claimer and io.Closer; a
// layer over a store that lacks one answers with an error wrapping
// stack.ErrNoKeyLister, ErrNoAllotter, ErrNoInvalidator or
// stack.ErrNoClaimer, never with
// silence. Stats replace metrics: the package
// imports no metrics library, its caller registers what Stats returns.
package compose

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/batch"
	"github.com/sluice-rl/sluice/store/hybrid"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/stack"
)

// Kinds of store, for Config.Kind.
const (
	KindMemory = "memory"
	KindRedis  = "redis"
)

// Modes of the denied-key cache, for Config.Denied.
const (
	// DeniedAuto: on unless Redis is a Cluster (whose refunds of
	// cross-slot batches can free quota before a denial's RetryAfter).
	DeniedAuto = "auto"
	DeniedOn   = "on"
	DeniedOff  = "off"
)

// Config is one whole store stack. Start from DefaultConfig; check with
// Validate (New does).
type Config struct {
	// Kind is where counters live: KindMemory (this process alone) or
	// KindRedis (shared by a fleet). Default KindMemory.
	Kind string
	// Memory configures the in-process store: every counter with
	// KindMemory; with KindRedis, the counters placed local and the
	// fallback of limits failing to local.
	Memory memory.Options
	// Redis configures the Redis store (KindRedis); URL is required.
	Redis redis.Options
	// Background, with KindRedis, makes New succeed when Redis does not
	// answer: the stack keeps dialling in the background and fails ops
	// with sluice.ErrStoreUnavailable meanwhile. Without it New fails.
	Background bool
	// Hybrid configures the store of counters placed hybrid (KindRedis). A
	// nil Resets means the Redis store's.
	Hybrid hybrid.Options
	// Denied is the denied-key cache's mode with KindRedis: DeniedAuto,
	// DeniedOn or DeniedOff. Default DeniedAuto.
	Denied string
	// DeniedOptions configure the cache (each of its two instances: one
	// before the Redis store, one before the hybrid store). A nil
	// Invalidator means the Redis store's.
	DeniedOptions hybrid.DeniedOptions
	// Logger receives the Redis store's connection messages: its
	// warnings (redis.Store.Warnings) at each connection, and what
	// MemoryWatch finds. Default: none.
	Logger *slog.Logger
	// MemoryWatch, with KindRedis, is how often every Redis node's
	// maxmemory-policy and evicted_keys are read once connected (and at
	// connection): a growth of evicted_keys is logged as a warning, a
	// policy that evicts Sluice's keys without Redis.AllowEviction as an
	// error, and Stack.Eviction reports them. Default DefaultMemoryWatch.
	MemoryWatch time.Duration

	// dial replaces redis.New (tests).
	dial func(redis.Options) (*redis.Store, error)
}

// DefaultConfig returns a Config that builds an in-process store.
func DefaultConfig() Config {
	return Config{Kind: KindMemory, Denied: DeniedAuto}
}

// Validate returns nil if New can build c, or every problem it has, each
// naming its field.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("compose: "+format, args...)) }
	switch c.Kind {
	case KindMemory, "":
	case KindRedis:
		if c.Redis.URL == "" {
			bad("Redis.URL: empty, want the Redis deployment's URL")
		} else if _, err := redis.ParseURL(c.Redis.URL); err != nil {
			bad("Redis.URL: %w", err)
		}
	default:
		bad("Kind: %q, want %q or %q", c.Kind, KindMemory, KindRedis)
	}
	switch c.Denied {
	case "", DeniedAuto, DeniedOn, DeniedOff:
	default:
		bad("Denied: %q, want %q, %q or %q", c.Denied, DeniedAuto, DeniedOn, DeniedOff)
	}
	if c.Memory.MaxKeys < 0 {
		bad("Memory.MaxKeys: %d, want ≥ 0 (0: the default)", c.Memory.MaxKeys)
	}
	h := c.Hybrid
	if h.Horizon < 0 {
		bad("Hybrid.Horizon: %v, want ≥ 0 (0: the default)", h.Horizon)
	}
	if h.Lease < 0 {
		bad("Hybrid.Lease: %v, want ≥ 0 (0: the default)", h.Lease)
	}
	if h.Split < 0 {
		bad("Hybrid.Split: %d, want ≥ 0 (0: the default)", h.Split)
	}
	if h.Keep < 0 || h.Keep >= 1 {
		bad("Hybrid.Keep: %v, want in [0, 1) (0: the default)", h.Keep)
	}
	if h.MaxKeys < 0 {
		bad("Hybrid.MaxKeys: %d, want ≥ 0 (0: the default)", h.MaxKeys)
	}
	if h.Idle < 0 {
		bad("Hybrid.Idle: %v, want ≥ 0 (0: the default)", h.Idle)
	}
	if c.MemoryWatch < 0 {
		bad("MemoryWatch: %v, want ≥ 0 (0: the default)", c.MemoryWatch)
	}
	if c.DeniedOptions.MaxKeys < 0 {
		bad("DeniedOptions.MaxKeys: %d, want ≥ 0 (0: the default)", c.DeniedOptions.MaxKeys)
	}
	return errors.Join(errs...)
}

// Stack is a built store stack. It is a sluice.Store, stack.KeyLister,
// stack.Allotter (the Redis store's, or the memory store's with
// KindMemory), stack.HealthReporter, stack.Invalidator,
// stack.ResetAnnouncer, stack.Claimer and io.Closer.
// It is safe for concurrent use.
type Stack struct {
	top    sluice.Store
	mem    *memory.Store
	fb     *memory.Store // KindRedis: the failure_mode local fallback
	conn   *connecting   // KindRedis
	hyb    *hybrid.Store // KindRedis
	dg, dh *cached       // the denied caches, nil when off
	placed *Placed       // KindRedis

	closeOnce sync.Once
	closeErr  error
}

var (
	_ sluice.Store         = (*Stack)(nil)
	_ stack.KeyLister      = (*Stack)(nil)
	_ stack.Allotter       = (*Stack)(nil)
	_ stack.HealthReporter = (*Stack)(nil)
	_ stack.Invalidator    = (*Stack)(nil)
	_ stack.ResetAnnouncer = (*Stack)(nil)
	_ stack.Claimer        = (*Stack)(nil)
	_ io.Closer            = (*Stack)(nil)
	_ batch.Decider        = (*Stack)(nil)
)

// New builds the stack c describes. On error nothing is left open.
func New(c Config) (*Stack, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	s := &Stack{mem: memory.New(c.Memory)}
	if c.Kind != KindRedis {
		s.top = s.mem
		return s, nil
	}
	// The fallback decides only while Redis fails, so it reads the real
	// clock on every decision: its windows are the instance's wall-clock
	// windows. (The coarse clock the hot path reads is advanced by a
	// ticker a loaded host may starve for tens of milliseconds, and a
	// window's edge would move with it.)
	fo := c.Memory
	if fo.Now == nil {
		fo.Now = time.Now
	}
	s.fb = memory.New(fo)
	log := c.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dial := c.dial
	if dial == nil {
		dial = redis.New
	}
	every := c.MemoryWatch
	if every == 0 {
		every = DefaultMemoryWatch
	}
	conn, err := connectRedis(c.Redis, c.Background, every, log, dial)
	if err != nil {
		s.mem.Close()
		s.fb.Close()
		return nil, err
	}
	s.conn = conn
	hopts := c.Hybrid
	onGrant := hopts.OnGrant
	hopts.OnGrant = func(key string) {
		// A key that was just allotted units admits from them: a denial
		// the cache above remembers would strand them until it expires.
		if s.dh != nil {
			s.dh.cache.Forget(key)
		}
		if onGrant != nil {
			onGrant(key)
		}
	}
	if hopts.Resets == nil {
		// A reset done through any instance of the fleet voids the
		// allotments this one holds of the key.
		hopts.Resets = conn
	}
	if s.hyb, err = hybrid.New(conn, hopts); err != nil {
		_ = conn.Close()
		s.mem.Close()
		s.fb.Close()
		return nil, fmt.Errorf("compose: Hybrid: %w", err)
	}
	var g, h sluice.Store = conn, s.hyb
	if c.Denied != DeniedOff {
		always := c.Denied == DeniedOn
		dopts := c.DeniedOptions
		if dopts.Invalidator == nil {
			// Refunds and resets done through any instance of the fleet
			// free the key in these caches too.
			dopts.Invalidator = conn
		}
		s.dg = newCached(conn, conn, always, dopts)
		s.dh = newCached(s.hyb, conn, always, dopts)
		g, h = s.dg, s.dh
	}
	s.placed = &Placed{Global: g, Hybrid: h, Local: s.mem, GlobalWindows: c.Redis.NativeFixedWindow}
	s.top = s.placed
	return s, nil
}

// Take implements sluice.Store.
func (s *Stack) Take(ctx context.Context, ops []sluice.Op, results []sluice.Result) error {
	return s.top.Take(ctx, ops, results)
}

// Decide implements batch.Decider, so the engine calls the stack once per
// check: with KindMemory, the memory store's Decide; with KindRedis,
// batch.Run over the placed layers in mode batch.Split (a batch mixing
// Takes with Charges or Refunds of other keys sends its Takes first, as a
// Cluster needs).
func (s *Stack) Decide(ctx context.Context, b *batch.Batch) error {
	if d, ok := s.top.(batch.Decider); ok {
		return d.Decide(ctx, b)
	}
	return batch.Run(ctx, s.top, b, batch.Split)
}

// Keys implements stack.KeyLister: every layer's keys, by placement.
func (s *Stack) Keys(ctx context.Context, prefix string, max int) ([]string, bool, error) {
	kl, ok := s.top.(stack.KeyLister)
	if !ok {
		return nil, false, fmt.Errorf("compose: %T: %w", s.top, stack.ErrNoKeyLister)
	}
	return kl.Keys(ctx, prefix, max)
}

// Allot implements stack.Allotter with the Redis store's allotments (so a
// hybrid store of the caller's own can lease from the stack); with
// KindMemory, with the memory store's (the counters Take charges).
func (s *Stack) Allot(ctx context.Context, reqs []stack.AllotRequest, out []stack.Allotment) error {
	if s.conn == nil {
		return s.mem.Allot(ctx, reqs, out)
	}
	return s.conn.Allot(ctx, reqs, out)
}

// Health implements stack.HealthReporter: the Redis store's nodes (one
// node "redis", open, while it is connecting); nil with KindMemory.
func (s *Stack) Health() []stack.NodeHealth {
	if s.conn == nil {
		return nil
	}
	return s.conn.Health()
}

// Invalidations implements stack.Invalidator with the Redis store's; it
// fails with an error wrapping ErrNoInvalidator with KindMemory (one
// process sees every op itself) or when the Redis store announces none.
func (s *Stack) Invalidations(ctx context.Context, fn func(keys []string, all bool)) error {
	if s.conn == nil {
		return fmt.Errorf("compose: %T: %w", s.mem, ErrNoInvalidator)
	}
	return s.conn.Invalidations(ctx, fn)
}

// Claim implements stack.Claimer: with KindMemory the memory store's
// (this process alone), with KindRedis Placed's (the Redis store's, or
// the local store's for keys placed local).
func (s *Stack) Claim(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	return claim(s.top, ctx, key, ttl)
}

// Resets implements stack.ResetAnnouncer with the Redis store's; it
// fails with an error wrapping ErrNoInvalidator with KindMemory or when
// the Redis store announces none.
func (s *Stack) Resets(ctx context.Context, fn func(keys []string, all bool)) error {
	if s.conn == nil {
		return fmt.Errorf("compose: %T: %w", s.mem, ErrNoInvalidator)
	}
	return s.conn.Resets(ctx, fn)
}

// Fallback is the in-process store of limits whose failure_mode is local
// (service.Config.Fallback): with KindRedis, a memory store of its own that
// reads the real clock on every decision (Config.Memory.Now if set); nil
// with KindMemory, whose store cannot fail.
func (s *Stack) Fallback() sluice.Store {
	if s.conn == nil {
		return nil
	}
	return s.fb
}

// Memory is the stack's in-process store (for its key count and cap).
func (s *Stack) Memory() *memory.Store { return s.mem }

// Redis is the Redis store once connected; nil before, and with
// KindMemory.
func (s *Stack) Redis() *redis.Store {
	if s.conn == nil {
		return nil
	}
	return s.conn.current()
}

// Eviction reports what the stack last read from the Redis nodes about
// eviction (Config.MemoryWatch); the zero Eviction with KindMemory and
// before Redis is connected.
func (s *Stack) Eviction() Eviction {
	if s.conn == nil {
		return Eviction{}
	}
	return s.conn.watch.state()
}

// HybridHeld returns the units of hybrid allotments the stack holds now
// and the keys holding them (hybrid.Store.Held); zeros without a hybrid
// store.
func (s *Stack) HybridHeld() (units int64, keys int) {
	if s.hyb == nil {
		return 0, 0
	}
	return s.hyb.Held()
}

// Stats are counters of a stack's layers since New.
type Stats struct {
	// DeniedCache reports whether the stack has the denied-key cache
	// (which may still be bypassed for a Redis Cluster, with DeniedAuto).
	DeniedCache bool
	// Denied sums the counters of the two denied-key caches.
	Denied hybrid.DeniedStats
	// HybridStore reports whether the stack has a hybrid store.
	HybridStore bool
	// Hybrid are the hybrid store's counters.
	Hybrid hybrid.Stats
	// Placed are the counters of routing across placements.
	Placed PlacedStats
}

// Stats returns the counters of the stack's layers.
func (s *Stack) Stats() Stats {
	var st Stats
	if s.dg != nil {
		a, b := s.dg.Stats(), s.dh.Stats()
		st.DeniedCache = true
		st.Denied = hybrid.DeniedStats{Hits: a.Hits + b.Hits, Stored: a.Stored + b.Stored, Keys: a.Keys + b.Keys,
			Invalidated: a.Invalidated + b.Invalidated, Flushes: a.Flushes + b.Flushes}
	}
	if s.hyb != nil {
		st.HybridStore, st.Hybrid = true, s.hyb.Stats()
	}
	if s.placed != nil {
		st.Placed = s.placed.Stats()
	}
	return st
}

// Close stops the denied caches and the hybrid store following the Redis
// store, gives back the hybrid store's allotments, then closes the Redis
// and in-process stores.
// Later calls return the first call's error.
func (s *Stack) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		if s.dg != nil {
			errs = append(errs, s.dg.cache.Close(), s.dh.cache.Close())
		}
		if s.hyb != nil {
			errs = append(errs, s.hyb.Close())
		}
		if s.conn != nil {
			errs = append(errs, s.conn.Close())
		}
		errs = append(errs, s.mem.Close())
		if s.fb != nil {
			errs = append(errs, s.fb.Close())
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}
