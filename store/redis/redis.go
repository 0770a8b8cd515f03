// Package redis is the sluice.Store over Redis: the seven algorithms as Lua
// scripts (scripts/*.lua, embedded), run atomically in Redis, so that many
// service instances enforce one limit together.
//
// # Batching
//
// One Take is one group of ops decided by one script call per hash slot.
// Concurrent Takes are coalesced: each batch target (the server, or in a
// cluster each slot) keeps at most Options.MaxInFlight script calls in flight,
// and Takes arriving meanwhile queue and leave together in the next call (up
// to Options.MaxBatch ops), so under load one EVALSHA decides dozens of
// Takes. Calls to different slots of one node share a connection and are
// pipelined by the client. An idle store adds no delay: a lone Take is sent at
// once.
//
// A call whose every group is one Take on a bucket or window key (the hot
// mix of an Envoy-style deployment) runs a script of its own,
// scripts/fast.lua: the same decisions, but one MGET for the call's keys,
// one SET per charge, one TIME per call and a reply of integers (for a
// bucket, the state the decision was made on: the store computes the
// figures with the Go algorithm), so that Redis spends little more per
// decision than the SET (see BENCHMARKS.md, "Redis instructions per
// decision"). A call that also leases allotments runs scripts/one.lua; any
// other call the general driver (scripts/driver.lua).
//
// # Keys and hash slots
//
// The Redis key of an op is Options.Prefix, one letter naming the
// algorithm (t g l f s o c, in the order of stack.Algorithms: like
// store/memory, the store keeps one state per algorithm and key), and the
// op's key; a key that has no hash tag of its own is wrapped in one
// ("sluice:g{key}"), so each key is its own slot. With a single node or
// Sentinel all ops of a Take run in one script call, whatever their slots.
// In a cluster, ops of one Take whose keys share a slot run in one script
// call and are all-or-nothing exactly as in store/memory; to make a
// request's keys share a slot, give them the same tag, e.g.
// "{tenant-42}:per_user:alice" and "{tenant-42}:per_tenant".
//
// Ops in different slots (only possible with Redis Cluster) are decided per
// slot, in parallel, each slot atomically; if any slot denies, the charges
// made in the other slots are refunded by a second script call and their ops
// report looks, so the Results are those of an all-or-nothing batch. If a
// slot fails instead (an error, or the caller's context ends), the slots
// that answered are refunded the same way and the Take returns the failure
// (see Failure). Between the charge and the refund (one round trip) another
// request may see those slots' keys charged and be denied although the
// batch that charged them is finally refused: a race that can only deny too
// much, never admit too much.
// A refund puts a key's old state back when nothing else touched it since
// the charge; otherwise it subtracts the charge from the current state, but
// only the part of it not yet drained (buckets) or still in the same window,
// so a refund never gives back more than the charge still holds.
//
// # Charge, refund and reset
//
// Ops whose sluice.Action is Charge, Refund or Reset run in the same
// script call as the Takes of their group, with the arithmetic of package
// algorithm (charges capped at 2 × capacity, refunds clamped at fresh); a
// Reset unlinks the key. The group stays all-or-nothing: the string states
// are written only once the group is decided, and a log key (sliding_log,
// concurrency) that a refund or reset writes at once is first kept with
// DUMP and put back with RESTORE if a Take of the group is denied, which
// costs O(size of the key) but only in such mixed groups. Across cluster
// slots there is no refund for actions, so a batch that spans slots and
// mixes a Take of cost > 0 with an action is refused (ErrCrossSlotAction);
// a batch of actions, looks and releases across slots is decided per slot,
// since none of its ops can be denied (if a slot fails, the others stay
// applied). A Take alone on a bucket or window key keeps its fast path.
//
// # Time
//
// With Options.Now nil the scripts read Redis TIME, one clock for the
// fleet. Key TTLs are set in the script, to when the key's state is back to
// a fresh key's, so every key expires once its traffic stops. (With the
// Redis clock and MinTTL 0, a fixed-window charge in the window the key
// already holds keeps its TTL, which ends with that window: the instant a
// new one would name.)
//
// # Failure
//
// Options.Timeout bounds each script call from when it is handed to the
// client (written to Redis) to its reply; a call with no reply in time fails
// every Take it carried with an error wrapping sluice.ErrStoreTimeout (the
// script may still have run: see docs/operations.md on unknown outcomes). Time a
// Take spends queued in the store behind calls in flight is backpressure,
// bounded only by the caller's context: a Take whose context ends while it
// is queued is dropped from the queue, never sent, and returns an error
// wrapping ctx.Err().
//
// Each node (the server; with Cluster each master) has a circuit breaker
// (see BreakerOptions) that counts script calls, not Takes, and opens only
// on evidence the node is down or erroring; while it is open, Takes for the
// node's keys fail at once with an error wrapping sluice.ErrStoreUnavailable.
// Health reports the breakers. The client reconnects by itself when Redis
// is back.
//
// A Take across cluster slots that fails in one slot first takes back what
// the other slots charged: slots still queued are dropped unsent, slots in
// flight are waited for (each call ends within Options.Timeout), and those
// that were allowed are refunded. The refunds are sent even when the
// caller's context has ended; the Take waits for them only while that
// context lasts, and returns the slot's error (with the refunds' errors
// appended, if they failed, without changing what it wraps). A refund that
// fails counts in Stats.RefundFailures. The failed slot's own charge, if
// its script ran after all, is settled like any late reply (below).
//
// A call that carries ops with sluice.Op.UndoIfUnknown is not given up at
// the timeout: its Takes fail with sluice.ErrStoreTimeout then, as any, but
// the call goes on waiting up to Options.LateReplyWait for its reply, in the
// background. If the reply says a group was charged, its marked ops are
// given back by a sticky group of sluice.Refund actions of the same costs
// (releases for concurrency acquires) (Stats.LateCharged, LateRefunded,
// RefundFailures). A call with no reply
// by then stays unknown (Stats.LateUnknown), and so does a call without
// such ops: its charge, if it ran, stays until it drains.
package redis

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"embed"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/cow"
	"github.com/sluice-rl/sluice/store/stack"
)

//go:embed scripts/*.lua
var scriptFS embed.FS

// algFiles lists, per algorithm, the script files it needs, in the order
// they are concatenated (shared helpers first).
var algFiles = [...][]string{
	sluice.TokenBucket:   {"bucket.lua", "token_bucket.lua"},
	sluice.GCRA:          {"bucket.lua", "gcra.lua"},
	sluice.LeakyBucket:   {"bucket.lua", "leaky_bucket.lua"},
	sluice.FixedWindow:   {"fixed_window.lua"},
	sluice.SlidingWindow: {"sliding_window.lua"},
	sluice.SlidingLog:    {"log.lua", "sliding_log.lua"},
	sluice.Concurrency:   {"log.lua", "concurrency.lua"},
}

// fileOrder is the order of all script files in a composed script.
var fileOrder = []string{
	"lib.lua", "bucket.lua", "gcra.lua", "leaky_bucket.lua", "token_bucket.lua",
	"fixed_window.lua", "sliding_window.lua", "log.lua", "sliding_log.lua",
	"concurrency.lua", "allot.lua", "guard.lua", "driver.lua",
}

// algMask has bit a set for each algorithm a a batch uses, and bit 0
// (allotBit) when it leases allotments.
type algMask uint8

// allotBit marks a batch holding allotment groups (modeAllot): its script
// includes allot.lua.
const allotBit algMask = 1

// batchScriptFor composes the batch script for the algorithms in m: lib.lua,
// their files, guard.lua and driver.lua. Redis runs the whole script body on every
// call, and each function it defines costs a closure, so a script carries
// only the algorithms its batch needs.
func batchScriptFor(m algMask) string {
	need := map[string]bool{"lib.lua": true, "guard.lua": true, "driver.lua": true, "allot.lua": m&allotBit != 0}
	for _, a := range stack.Algorithms() {
		if m&(1<<a) != 0 {
			for _, f := range algFiles[a] {
				need[f] = true
			}
		}
	}
	var names []string
	for _, f := range fileOrder {
		if need[f] {
			names = append(names, f)
		}
	}
	return compose(names...)
}

// compose concatenates the named script files.
func compose(names ...string) string {
	var b strings.Builder
	for _, n := range names {
		src, err := scriptFS.ReadFile("scripts/" + n)
		if err != nil {
			panic("redis: embedded script missing: " + n) // a build defect, caught by any test
		}
		b.Write(src)
		b.WriteByte('\n')
	}
	return b.String()
}

// Defaults of Options.
const (
	DefaultPrefix      = "sluice:"
	DefaultTimeout     = 1 * time.Second
	DefaultMaxBatch    = 128
	DefaultMaxInFlight = 2
)

// Options configure a Store. Only URL is required.
type Options struct {
	// URL names the Redis deployment: single node, Sentinel or Cluster. See
	// ParseURL for the forms.
	URL string
	// TLS, if set, is the TLS configuration of every connection (a private
	// CA in RootCAs, a client certificate in Certificates), whatever the
	// URL's scheme says; nil keeps the URL's (rediss:// is TLS with the
	// system's CAs). With an empty ServerName each node's host is verified.
	TLS *tls.Config
	// Prefix starts every key the store writes. Default DefaultPrefix. It
	// must not contain '{' or '}' (they would change the hash slot).
	Prefix string
	// Timeout bounds each script call, from when it is written to Redis to
	// its reply. Time queued before that is bounded only by the Take's
	// context. Default DefaultTimeout (docs/operations.md says why that value).
	Timeout time.Duration
	// Now, if set, is the clock: its time is passed to the scripts (tests use
	// a fake clock). Nil means the scripts read Redis TIME.
	Now func() time.Time
	// MinTTL is the least TTL a key gets. Default 0 with the Redis clock:
	// TTLs are exactly the time until a key's state is fresh again. With Now
	// set it defaults to one hour, because a fake clock says nothing about
	// Redis's own expiry clock.
	MinTTL time.Duration
	// MaxBatch is the most ops one script call decides, summed over the
	// Takes it carries (a Take with more ops goes alone). Default 128.
	MaxBatch int
	// MaxInFlight is how many script calls each batch target (the server, or
	// a cluster slot) may have in flight at once; Takes arriving meanwhile
	// queue and leave together in the next call. A call beyond the first
	// starts only once MaxBatch/4 ops wait, so calls stay large. Default 2:
	// one call is being decided while the next is on the wire (see
	// BENCHMARKS.md); raise it when the round trip to Redis is long compared
	// with a script call.
	MaxInFlight int
	// Breaker configures the circuit breaker of each node. The zero value
	// means every default.
	Breaker BreakerOptions
	// LateReplyWait is how much longer than Timeout a script call that
	// carries ops with sluice.Op.UndoIfUnknown goes on waiting for its reply
	// after its Takes failed with sluice.ErrStoreTimeout, so that a charge
	// the reply reveals can be refunded (see docs/operations.md on unknown
	// outcomes). Calls without such ops are given up at Timeout. Default
	// DefaultLateReplyWait × Timeout.
	LateReplyWait time.Duration
	// AllowEviction accepts a Redis whose maxmemory-policy can evict
	// Sluice's keys (any policy but noeviction). Without it New refuses such a
	// Redis with an error wrapping ErrEvictionPolicy: an evicted counter
	// starts again from zero and its limit admits more than its quota, with
	// nothing in Redis saying so. With it New succeeds and Warnings says the
	// risk was accepted; follow Memory's EvictedKeys (store/compose does, and
	// sluice serve exports it as sluice_redis_evicted_keys_total).
	AllowEviction bool
	// NativeFixedWindow decides fixed_window ops with native commands
	// (INCRBY on a per-window integer key, the expiry set once per window
	// per instance) instead of a script: about a third of what Redis spends
	// per decision on the script path (BENCHMARKS.md, "Native fixed
	// windows"). Off by default; see native.go and docs/stores.md for what
	// it keeps and what it changes: a denied Take's charge is taken back one
	// round trip later (a concurrent Take may be denied meanwhile, never
	// admitted over the limit); a batch may not mix fixed_window ops with
	// other algorithms with a Charge, Refund, Reset or release
	// (ErrNativeMixed); a call reaching Redis after its timeout still
	// charges (no deadline guard), taken back once its late reply comes for
	// ops with sluice.Op.UndoIfUnknown (as on the script path); and
	// its keys are not the script path's, so switching it on or off starts
	// every fixed window afresh.
	NativeFixedWindow bool
	// NativeSlidingWindow decides sliding_window ops with native commands,
	// as NativeFixedWindow does fixed_window ops: the two counts of a
	// sliding window are two per-window integer keys, the current window's
	// charged with INCRBY and the previous one's read with GET in the same
	// pipeline, the decision made by algorithm.SlidingWindow on the counts
	// and Redis's TIME. It keeps and changes what NativeFixedWindow does
	// (a denied Take's transient charge, ErrNativeMixed, ErrNativePaired,
	// no deadline guard, keys of its own). Off by default.
	NativeSlidingWindow bool
}

// DefaultLateReplyWait is the default Options.LateReplyWait, in multiples
// of Options.Timeout: as long as the client waits on a hung connection
// before it closes it.
const DefaultLateReplyWait = 10

// Validate reports every invalid option (zero values are valid: they mean
// the defaults). New calls it.
func (o *Options) Validate() error {
	var errs []error
	if o.URL == "" {
		errs = append(errs, errors.New("Options.URL is required"))
	}
	if strings.ContainsAny(o.Prefix, "{}") {
		errs = append(errs, fmt.Errorf("prefix %q must not contain '{' or '}'", o.Prefix))
	}
	if o.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout %v, want positive (0 for the default)", o.Timeout))
	}
	if o.MinTTL < 0 {
		errs = append(errs, fmt.Errorf("min TTL %v, want ≥ 0", o.MinTTL))
	}
	if o.MaxBatch < 0 {
		errs = append(errs, fmt.Errorf("max batch %d, want ≥ 1 (0 for the default)", o.MaxBatch))
	}
	if o.MaxInFlight < 0 {
		errs = append(errs, fmt.Errorf("max in flight %d, want ≥ 1 (0 for the default)", o.MaxInFlight))
	}
	if o.LateReplyWait < 0 || o.LateReplyWait > time.Hour {
		errs = append(errs, fmt.Errorf("late reply wait %v, want between 0 (the default) and 1h", o.LateReplyWait))
	}
	errs = append(errs, o.Breaker.validate()...)
	for i, e := range errs {
		errs[i] = fmt.Errorf("redis: %w", e)
	}
	return errors.Join(errs...)
}

// withDefaults returns o with zero fields set to their defaults.
func (o Options) withDefaults() Options {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MinTTL == 0 && o.Now != nil {
		o.MinTTL = time.Hour
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	if o.LateReplyWait == 0 {
		o.LateReplyWait = DefaultLateReplyWait * o.Timeout
	}
	o.Breaker = o.Breaker.withDefaults()
	return o
}

// Store is the Redis store. It is safe for concurrent use. Create it with
// New and Close it when done.
type Store struct {
	client  rueidis.Client
	scripts [256]atomic.Pointer[rueidis.Lua] // by algMask, composed on first use
	fast    *rueidis.Lua                     // scripts/fast.lua (batch.go)
	ones    [256]atomic.Pointer[rueidis.Lua] // scripts/one.lua by algMask (batch.go)
	// The native path (native.go).
	native          bool // natFixed || natSliding
	natFixed        bool // Options.NativeFixedWindow
	natSliding      bool // Options.NativeSlidingWindow
	natOne          batcher
	natSlots        []atomic.Pointer[batcher]
	nativeLua       *rueidis.Lua
	expired         expCache
	hints           countHints
	natMargin       int64 // ms a per-window key outlives its window (Redis clock)
	minTTLms        int64
	nativeCalls     atomic.Uint64
	nativeRetries   atomic.Uint64
	nativeTakenBack atomic.Uint64
	cluster         bool
	prefix          string
	channel         string // Pub/Sub channel of invalidations (invalidate.go)
	timeout         time.Duration
	now             func() time.Time
	minTTL          string
	maxBatch        int
	maxInFlight     int
	closed          atomic.Bool
	calls           atomic.Uint64
	groups          atomic.Uint64
	opsDecided      atomic.Uint64
	allots          atomic.Uint64 // allotment requests (allot.go)
	// refundFailures counts refund groups that failed (cross-slot and late).
	refundFailures atomic.Uint64
	// Late replies (settleLate): groups found charged, refunded, and calls
	// with no reply even then.
	lateWait     time.Duration
	lateCharged  atomic.Uint64
	lateRefunded atomic.Uint64
	lateUnknown  atomic.Uint64
	lateExpired  atomic.Uint64
	// inv is the subscription to invalidations (invalidate.go), and
	// subscriptions counts its confirmations.
	inv           invHub
	subscriptions atomic.Uint64

	one   batcher // single node, Sentinel
	slots []atomic.Pointer[batcher]
	nodes nodes
	stop  chan struct{} // closed by Close

	// callHook, if set (by tests, before the first Take), sees the duration
	// and outcome of every script call.
	callHook func(time.Duration, callOutcome)

	leaseMu sync.Mutex
	leases  *mrand.ChaCha8

	// warnings are what New found to warn about (evict.go).
	warnings []string
}

// ErrClosed is returned by Take after Close.
var ErrClosed = errors.New("redis: store closed")

// ErrCrossSlotAction is returned by Take for a batch whose ops span Redis
// Cluster hash slots and that mixes a Take that may be denied (cost > 0)
// with a Charge, Refund or Reset: the cross-slot refund that keeps such a
// batch all-or-nothing cannot take those back. Give the keys one hash tag,
// or send the actions in a Take of their own. Nothing was applied.
var ErrCrossSlotAction = errors.New("redis: a batch across hash slots may not mix takes with charges, refunds or resets")

// New connects to the Redis named by opts.URL and returns a Store. It fails
// if the URL or options are invalid or Redis cannot be reached, and, unless
// opts.AllowEviction is set, with an error wrapping ErrEvictionPolicy if a
// node's maxmemory-policy can evict Sluice's keys (see Memory for how it is
// read). What it could not check, or accepted, is in Warnings.
func New(opts Options) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	copt, err := clientOption(opts.URL)
	if err != nil {
		return nil, err
	}
	if opts.TLS != nil {
		copt.TLSConfig = opts.TLS.Clone() // an empty ServerName: each node's host is verified
	}
	copt.DisableCache = true // no client-side caching: every decision is a write
	copt.DisableRetry = true // a retried script would charge twice
	if copt.Dialer.Timeout == 0 {
		// A (re)dial, handshake included, is part of the call that needs it.
		copt.Dialer.Timeout = opts.Timeout
	}
	if copt.ConnWriteTimeout == 0 {
		// A hung server (SIGSTOP, a stuck failover) closes the connection
		// after this long, so the client redials instead of waiting on it.
		copt.ConnWriteTimeout = max(10*opts.Timeout, time.Second)
	}
	client, err := rueidis.NewClient(copt)
	if err != nil {
		return nil, fmt.Errorf("redis: connect to %s: %w", redact(opts.URL), err)
	}
	var seed [32]byte
	_, _ = rand.Read(seed[:])
	s := &Store{
		client:      client,
		cluster:     client.Mode() == rueidis.ClientModeCluster,
		prefix:      opts.Prefix,
		channel:     opts.Prefix + invalidateChannel,
		timeout:     opts.Timeout,
		now:         opts.Now,
		minTTL:      strconv.FormatInt(opts.MinTTL.Milliseconds(), 10),
		maxBatch:    opts.MaxBatch,
		maxInFlight: opts.MaxInFlight,
		lateWait:    opts.LateReplyWait,
		leases:      mrand.NewChaCha8(seed),
		stop:        make(chan struct{}),
		fast:        rueidis.NewLuaScript(compose("head.lua", "fast.lua")),
	}
	s.nodes.opts = opts.Breaker
	s.one = batcher{s: s, slot: -1}
	if s.cluster {
		s.slots = make([]atomic.Pointer[batcher], numSlots)
	}
	if opts.NativeFixedWindow || opts.NativeSlidingWindow {
		s.native, s.natFixed, s.natSliding = true, opts.NativeFixedWindow, opts.NativeSlidingWindow
		s.natOne = batcher{s: s, slot: -1, native: true}
		if s.cluster {
			s.natSlots = make([]atomic.Pointer[batcher], numSlots)
		}
		s.nativeLua = rueidis.NewLuaScript(compose("lib.lua", "sliding_window.lua", "native.lua"))
		s.minTTLms = opts.MinTTL.Milliseconds()
		s.natMargin = max(time.Second, 2*opts.Timeout, opts.MinTTL).Milliseconds()
	}
	addr := ""
	if len(copt.InitAddress) > 0 {
		addr = copt.InitAddress[0]
	}
	if err := s.initNodes(addr); err != nil {
		client.Close()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*max(opts.Timeout, time.Second))
	s.warnings, err = s.checkNodes(ctx, opts.AllowEviction)
	cancel()
	if err != nil {
		client.Close()
		return nil, err
	}
	go s.watchTopology()
	return s, nil
}

// Close closes the connections. Takes in flight fail; later Takes return
// ErrClosed.
func (s *Store) Close() error {
	if s.closed.CompareAndSwap(false, true) {
		close(s.stop)
		s.client.Close()
	}
	return nil
}

// Stats are counters of a Store since New.
type Stats struct {
	// Calls is the number of script calls (EVALSHA) sent.
	Calls uint64
	// Groups is the number of groups they decided: one per Take and slot,
	// plus refunds.
	Groups uint64
	// Ops is the number of ops they decided.
	Ops uint64
	// RefundFailures is the number of refund groups that failed: groups of
	// a cross-slot Take that was denied or failed in another slot, and
	// late refunds (LateCharged), whose charges could not be taken back
	// and may remain until they drain.
	RefundFailures uint64
	// LateCharged is the number of groups with ops to undo if unknown
	// (sluice.Op.UndoIfUnknown) whose Take failed with
	// sluice.ErrStoreTimeout and whose late reply said they were charged.
	// Each is then refunded: LateRefunded counts those that were, and
	// RefundFailures those that failed.
	LateCharged uint64
	// LateRefunded is the number of late refunds that succeeded.
	LateRefunded uint64
	// LateUnknown is the number of script calls carrying ops to undo if
	// unknown that got no reply within Options.LateReplyWait either (or
	// one the store could not read): whether they charged stays unknown.
	LateUnknown uint64
	// LateExpired is the number of such calls whose late reply said they
	// reached Redis after their deadline (scripts/guard.lua) and did
	// nothing: nothing was charged, so nothing is refunded.
	LateExpired uint64
	// NativeCalls is the number of pipelines the native path sent
	// (Options.NativeFixedWindow); its script calls (actions) count in
	// Calls.
	NativeCalls uint64
	// NativeRetries is the number of native groups sent again because the
	// window their keys named was not the one Redis's TIME named.
	NativeRetries uint64
	// NativeTakenBack is the number of denied native groups whose charges
	// were taken back (DECRBY).
	NativeTakenBack uint64
	// Subscriptions is the number of times the store's subscription to
	// invalidations (see Invalidations) was confirmed: 1 after the first
	// Invalidations or Resets call, and one more after each lost
	// connection.
	Subscriptions uint64
}

// Stats returns the store's counters. Groups/Calls is the mean number of
// Takes coalesced into one call.
func (s *Store) Stats() Stats {
	return Stats{Calls: s.calls.Load(), Groups: s.groups.Load(), Ops: s.opsDecided.Load(),
		RefundFailures: s.refundFailures.Load(), LateCharged: s.lateCharged.Load(),
		LateRefunded: s.lateRefunded.Load(), LateUnknown: s.lateUnknown.Load(),
		LateExpired: s.lateExpired.Load(), Subscriptions: s.subscriptions.Load(),
		NativeCalls: s.nativeCalls.Load(), NativeRetries: s.nativeRetries.Load(), NativeTakenBack: s.nativeTakenBack.Load()}
}

// Cluster reports whether the store talks to a Redis Cluster.
func (s *Store) Cluster() bool { return s.cluster }

// script returns the batch script for the algorithms in m.
func (s *Store) script(m algMask) *rueidis.Lua {
	p := &s.scripts[m]
	if l := p.Load(); l != nil {
		return l
	}
	l := rueidis.NewLuaScript(batchScriptFor(m))
	if p.CompareAndSwap(nil, l) {
		return l
	}
	return p.Load()
}

// oneScript returns scripts/head.lua, lib.lua, the files of the
// algorithms in m, allot.lua for allotBit (else a line declaring allot,
// which one.lua reads, nil) and one.lua, concatenated.
func (s *Store) oneScript(m algMask) *rueidis.Lua {
	p := &s.ones[m]
	if l := p.Load(); l != nil {
		return l
	}
	names := []string{"head.lua", "lib.lua"}
	need := map[string]bool{}
	for _, a := range stack.Algorithms() {
		if m&(1<<a) != 0 {
			for _, f := range algFiles[a] {
				need[f] = true
			}
		}
	}
	for _, f := range fileOrder {
		if need[f] {
			names = append(names, f)
		}
	}
	src := compose(names...)
	if m&allotBit != 0 {
		src += compose("allot.lua")
	} else {
		src += "local allot\n"
	}
	l := rueidis.NewLuaScript(src + compose("one.lua"))
	if p.CompareAndSwap(nil, l) {
		return l
	}
	return p.Load()
}

// specs caches limitSpec (limits come from rules: few, rarely new).
var specs cow.Map[sluice.Limit, string]

// limitSpec returns the script's encoding of a valid limit,
// "alg:quota:window:burst:interval" (algorithm.Params), cached.
func limitSpec(l sluice.Limit) string {
	if spec, ok := specs.Get(l); ok {
		return spec
	}
	p := stack.Params(l)
	spec := fmt.Sprintf("%d:%d:%d:%d:%d", l.Algorithm, p.Quota, p.Window, p.Burst, p.Interval)
	specs.Put(l, spec)
	return spec
}

// newLease returns a random nonzero lease ID.
func (s *Store) newLease() uint64 {
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	for {
		if v := s.leases.Uint64(); v != 0 {
			return v
		}
	}
}

// Take implements sluice.Store. See the package documentation for how a
// Take is batched and what is atomic.
func (s *Store) Take(ctx context.Context, ops []sluice.Op, results []sluice.Result) error {
	if len(results) != len(ops) {
		return fmt.Errorf("redis: %d ops, %d results: %w", len(ops), len(results), stack.ErrResultsLength)
	}
	if len(ops) == 0 {
		return nil
	}
	for i := range ops {
		if err := stack.CheckOp(&ops[i]); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
	}
	if s.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	var now string
	if s.now != nil {
		now = strconv.FormatInt(s.now().UnixMicro(), 10)
	}
	if s.native {
		for i := range ops {
			if s.isNative(&ops[i]) && stack.Paired(&ops[i]) {
				return fmt.Errorf("redis: op %q: %w", ops[i].Key, ErrNativePaired)
			}
		}
		switch nat, mixed := s.nativeGroupOf(ops); {
		case mixed:
			return s.takeMixed(ctx, ops, results, now)
		case nat:
			_, err := s.takeNative(ctx, ops, results, now)
			return err
		}
	}
	return s.takeScript(ctx, ops, results, now)
}

// takeScript decides ops on the script path.
func (s *Store) takeScript(ctx context.Context, ops []sluice.Op, results []sluice.Result, now string) error {

	if !s.cluster {
		if n := s.nodes.single; n.open() {
			return n.unavailable()
		}
		r := s.newRequest(ops, nil, now, modeDecide)
		if err := s.do(ctx, &s.one, r); err != nil {
			return err
		}
		r.results(ops, results, !r.denied())
		return nil
	}
	first := slotOf(redisKey(s.prefix, ops[0].Limit.Algorithm, ops[0].Key))
	same := true
	for i := 1; i < len(ops) && same; i++ {
		same = slotOf(redisKey(s.prefix, ops[i].Limit.Algorithm, ops[i].Key)) == first
	}
	if same {
		if n := s.nodeFor(first); n.open() {
			return n.unavailable()
		}
		r := s.newRequest(ops, nil, now, modeDecide)
		if err := s.do(ctx, s.slotBatcher(first), r); err != nil {
			return err
		}
		r.results(ops, results, !r.denied())
		return nil
	}
	return s.takeSlots(ctx, ops, results, now)
}

// takeSlots decides a Take whose ops span hash slots: one group per slot,
// all in parallel. If any slot denies, or fails (an error, or the caller
// gives up waiting), the groups that answered and charged are refunded
// (undo), so that a batch that is not admitted keeps no charge. A batch that
// no op can deny (actions, looks and releases) needs no refund: each slot
// decides its group alone, and a slot that fails leaves the others applied.
func (s *Store) takeSlots(ctx context.Context, ops []sluice.Op, results []sluice.Result, now string) error {
	mode := modeUndo
	if action, deniable := kinds(ops); action >= 0 {
		if deniable >= 0 {
			return fmt.Errorf("redis: op %q (%v) and op %q (take, cost %d): %w",
				ops[action].Key, ops[action].Action, ops[deniable].Key, ops[deniable].Cost, ErrCrossSlotAction)
		}
		mode = modeDecide
	}
	bySlot := map[int][]int{}
	var order []int
	for i := range ops {
		sl := slotOf(redisKey(s.prefix, ops[i].Limit.Algorithm, ops[i].Key))
		if _, ok := bySlot[sl]; !ok {
			order = append(order, sl)
			if n := s.nodeFor(sl); n.open() {
				return n.unavailable() // before charging anything
			}
		}
		bySlot[sl] = append(bySlot[sl], i)
	}
	// Take checked ctx: every group is queued, so that none is sent without
	// the others being known to undo.
	reqs := make([]*request, len(order))
	undoable := make([]bool, len(order))
	for k, sl := range order {
		reqs[k] = s.newRequest(ops, bySlot[sl], now, mode)
		undoable[k] = mode == modeUndo && reqs[k].charged(ops)
		s.slotBatcher(sl).submit(reqs[k])
	}
	var failed error
	for _, r := range reqs {
		if failed = r.wait(ctx); failed != nil {
			break
		}
	}
	denied := false
	for _, r := range reqs {
		denied = denied || (failed == nil && r.denied())
	}
	if failed == nil && !denied {
		for _, r := range reqs {
			r.results(ops, results, true)
		}
		return nil
	}
	u := s.undo(reqs, undoable, order)
	select {
	case <-u.done:
	case <-ctx.Done():
		// The refunds go on without the caller (see undo).
		if failed != nil {
			return failed
		}
		return fmt.Errorf("redis: gave up waiting for the refund after a denied cross-slot batch (it is still sent): %w", ctx.Err())
	}
	if failed != nil {
		if u.err != nil {
			return fmt.Errorf("%w; then refunding the slots that answered failed too (charges may remain): %v", failed, u.err)
		}
		return failed
	}
	if u.err != nil {
		return fmt.Errorf("redis: refund after a denied cross-slot batch (charges may remain): %w", u.err)
	}
	for _, r := range reqs {
		r.results(ops, results, false)
	}
	for _, f := range u.refunds {
		if f != nil {
			f.results(ops, results, false)
		}
	}
	return nil
}

// undoing is the refund of a cross-slot batch that was not admitted.
type undoing struct {
	refunds []*request // by group, nil where there was nothing to refund
	err     error      // the refunds that failed, joined
	done    chan struct{}
}

// undo takes back, in a goroutine of its own, what the groups reqs of a
// cross-slot batch charged (undoable[k] says group k may have charged, and
// order[k] is its slot), once the batch is denied or failed: a group still
// queued is dropped unsent; one sent is waited for (its call ends within the
// store timeout), and if it answered and was allowed it is refunded. The
// refunds are sticky, so they are sent even when the caller has given up;
// their outcome is in the returned undoing once done is closed, and a refund
// that fails counts in Stats.RefundFailures. A group that failed itself is
// not refunded: whether it ran is unknown (see docs/operations.md on unknown
// outcomes). The goroutine reads only the requests, never the caller's ops
// or results, which the caller may reuse once it returns.
func (s *Store) undo(reqs []*request, undoable []bool, order []int) *undoing {
	u := &undoing{refunds: make([]*request, len(reqs)), done: make(chan struct{})}
	pending := make([]bool, len(reqs))
	for k, r := range reqs {
		pending[k] = undoable[k] && !r.state.CompareAndSwap(reqQueued, reqAbandoned) && r.state.Load() != reqAbandoned
	}
	refund := func(k int) {
		pending[k] = false
		if r := reqs[k]; r.err == nil && !r.denied() {
			u.refunds[k] = s.newRefund(r)
			s.slotBatcher(order[k]).submit(u.refunds[k])
		}
	}
	go func() {
		defer close(u.done)
		// The groups that answered first, then the others as they answer:
		// the sooner a charge is taken back, the fewer requests it denies.
		for k, r := range reqs {
			if pending[k] {
				select {
				case <-r.done:
					refund(k)
				default:
				}
			}
		}
		for k, r := range reqs {
			if pending[k] {
				<-r.done
				refund(k)
			}
		}
		var errs []error
		for _, f := range u.refunds {
			if f == nil {
				continue
			}
			if <-f.done; f.err != nil {
				s.refundFailures.Add(1)
				errs = append(errs, f.err)
			}
		}
		u.err = errors.Join(errs...)
	}()
	return u
}

// kinds returns the index of the first op of ops that is a Charge, Refund
// or Reset (or a reservation on a sliding_log), and of the first that may
// be denied (a Take of cost > 0, a reservation); -1 for none.
func kinds(ops []sluice.Op) (action, deniable int) {
	action, deniable = -1, -1
	for i := range ops {
		switch op := &ops[i]; {
		case op.Action != sluice.Take:
			if action < 0 {
				action = i
			}
		case stack.Paired(op) && op.Release:
			// A void: never denied, nothing to take back.
		case stack.Paired(op):
			// A reservation or its settle: it may deny. The cross-slot
			// refund takes it back with its record (driver.lua's
			// put_undo), except on a sliding_log, whose log refund it
			// cannot undo: that one counts as an action too.
			if action < 0 && op.Limit.Algorithm == sluice.SlidingLog {
				action = i
			}
			if deniable < 0 {
				deniable = i
			}
		case !op.Release && op.Cost > 0 && deniable < 0:
			deniable = i
		}
	}
	return action, deniable
}

func (s *Store) slotBatcher(slot int) *batcher {
	p := &s.slots[slot]
	if b := p.Load(); b != nil {
		return b
	}
	b := &batcher{s: s, slot: slot}
	if p.CompareAndSwap(nil, b) {
		return b
	}
	return p.Load()
}

// do submits r and waits for it.
func (s *Store) do(ctx context.Context, b *batcher, r *request) error {
	if err := s.submit(ctx, b, r); err != nil {
		return err
	}
	return r.wait(ctx)
}

// submit queues r unless ctx is already done.
func (s *Store) submit(ctx context.Context, b *batcher, r *request) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	b.submit(r)
	return nil
}
