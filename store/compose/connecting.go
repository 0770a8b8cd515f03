package compose

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/stack"
)

// errNotConnected is what a connecting store answers until Redis is reached.
var errNotConnected = fmt.Errorf("redis store not connected yet: %w", sluice.ErrStoreUnavailable)

// connecting is the Redis store, or its stand-in while Redis cannot be
// reached: instead of failing at start (and crash-looping under an
// orchestrator, as envoyproxy/ratelimit does), every op fails over to its
// limit's failure mode at once (sluice.ErrStoreUnavailable) and Health
// reports one node "redis" that is open; meanwhile it keeps dialling, and
// once connected it passes everything to the real store. It forwards
// every optional interface the Redis store has: stack.Allotter,
// stack.KeyLister, stack.HealthReporter, stack.Invalidator and
// stack.ResetAnnouncer (when the Redis store implements them), Cluster
// and Close.
//
// It is safe for concurrent use.
type connecting struct {
	opts redis.Options
	log  *slog.Logger
	dial func(redis.Options) (*redis.Store, error)

	store atomic.Pointer[redis.Store] // nil until connected
	watch *watcher                    // the nodes' eviction, from connection on

	mu     sync.Mutex
	closed bool
	done   chan struct{} // closed by Close
	up     chan struct{} // closed once connected
}

// connectRedis dials opts once; if Redis does not answer and background
// is set, it returns a store that keeps dialling, else the error. A Redis
// refused for its eviction policy (redis.ErrEvictionPolicy) fails it even
// with background: that is a configuration to fix, not an outage to wait
// out. Once connected, the nodes' eviction is read every watchEvery.
func connectRedis(opts redis.Options, background bool, watchEvery time.Duration, log *slog.Logger, dial func(redis.Options) (*redis.Store, error)) (*connecting, error) {
	c := &connecting{opts: opts, log: log, dial: dial, done: make(chan struct{}), up: make(chan struct{}),
		watch: &watcher{allow: opts.AllowEviction, every: watchEvery, log: log}}
	rs, err := dial(opts)
	if err == nil {
		c.connected(rs, true)
		return c, nil
	}
	if !background || errors.Is(err, redis.ErrEvictionPolicy) {
		return nil, fmt.Errorf("compose: redis: %w", err)
	}
	log.Warn("Redis unreachable at start; serving with each limit's failure mode until it answers", "err", err)
	go c.connect()
	return c, nil
}

// current returns the real store, or nil until connected.
func (c *connecting) current() *redis.Store { return c.store.Load() }

// Take passes to the real store once connected, else fails.
func (c *connecting) Take(ctx context.Context, ops []sluice.Op, results []sluice.Result) error {
	s := c.current()
	if s == nil {
		return errNotConnected
	}
	return s.Take(ctx, ops, results)
}

// Allot passes to the real store once connected, else fails.
func (c *connecting) Allot(ctx context.Context, reqs []stack.AllotRequest, out []stack.Allotment) error {
	s := c.current()
	if s == nil {
		return errNotConnected
	}
	return s.Allot(ctx, reqs, out)
}

// Keys passes to the real store once connected, else fails (with
// sluice.ErrStoreUnavailable: the store can list keys, not yet).
func (c *connecting) Keys(ctx context.Context, prefix string, max int) ([]string, bool, error) {
	s := c.current()
	if s == nil {
		return nil, false, errNotConnected
	}
	return s.Keys(ctx, prefix, max)
}

// Claim passes to the real store once connected, else fails (with
// sluice.ErrStoreUnavailable).
func (c *connecting) Claim(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	s := c.current()
	if s == nil {
		return false, errNotConnected
	}
	return s.Claim(ctx, key, ttl)
}

// Cluster reports whether the connected store is a Redis Cluster; true
// (the cautious answer for the denied-key cache) until connected.
func (c *connecting) Cluster() bool {
	s := c.current()
	return s == nil || s.Cluster()
}

// Health reports the real store's nodes once connected; before, one node
// "redis" that is out.
func (c *connecting) Health() []stack.NodeHealth {
	s := c.current()
	if s == nil {
		return []stack.NodeHealth{{Node: "redis", State: "open", LastError: "not connected yet"}}
	}
	return s.Health()
}

// Invalidations waits until connected, then passes to the real store's
// stack.Invalidator (whose first call says to drop everything: nothing
// was heard before); it returns redis.ErrClosed once closed, ctx's error
// when ctx is done, and fails with ErrNoInvalidator when the Redis store
// has none.
func (c *connecting) Invalidations(ctx context.Context, fn func(keys []string, all bool)) error {
	if _, ok := any((*redis.Store)(nil)).(stack.Invalidator); !ok {
		return fmt.Errorf("compose: %T: %w", (*redis.Store)(nil), ErrNoInvalidator)
	}
	if err := c.waitUp(ctx); err != nil {
		return err
	}
	return invalidations(c.current(), ctx, fn)
}

// Resets is Invalidations for stack.ResetAnnouncer: it waits until
// connected, then passes to the real store's (whose first call says all:
// nothing was heard before).
func (c *connecting) Resets(ctx context.Context, fn func(keys []string, all bool)) error {
	if _, ok := any((*redis.Store)(nil)).(stack.ResetAnnouncer); !ok {
		return fmt.Errorf("compose: %T: %w", (*redis.Store)(nil), ErrNoInvalidator)
	}
	if err := c.waitUp(ctx); err != nil {
		return err
	}
	return resets(c.current(), ctx, fn)
}

// waitUp waits until the Redis store is connected; it returns
// redis.ErrClosed once closed first, or ctx's error when ctx is done first.
func (c *connecting) waitUp(ctx context.Context) error {
	select {
	case <-c.up:
	case <-c.done:
		return redis.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// connect dials with exponential backoff (100ms to 5s) until it succeeds or
// the store is closed.
func (c *connecting) connect() {
	wait := 100 * time.Millisecond
	var refusedMsg string // the last refusal logged
	for {
		select {
		case <-c.done:
			return
		case <-time.After(wait):
		}
		rs, err := c.dial(c.opts)
		if err != nil {
			if errors.Is(err, redis.ErrEvictionPolicy) {
				// Reached, but refused: loud, and dialled again in case
				// the operator fixes the policy.
				if msg := err.Error(); msg != refusedMsg {
					refusedMsg = msg
					c.log.Error("Redis refused: its eviction policy would make limits admit more than their quota; serving with each limit's failure mode until it is fixed", "err", err)
				}
			} else {
				c.log.Debug("Redis still unreachable", "err", err, "retry_in", wait)
			}
			wait = min(2*wait, 5*time.Second)
			continue
		}
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			_ = rs.Close()
			return
		}
		c.connected(rs, false)
		c.mu.Unlock()
		c.log.Info("Redis connected")
		return
	}
}

// connected installs rs, logs its warnings and starts watching its nodes'
// eviction; first, with readNow, it reads them once (so that Eviction
// knows them when New returns). With a background dial, c.mu is held.
func (c *connecting) connected(rs *redis.Store, readNow bool) {
	c.store.Store(rs)
	close(c.up)
	for _, w := range rs.Warnings() {
		c.log.Warn(w)
	}
	if readNow {
		c.watch.read(context.Background(), rs)
	}
	go c.watch.run(rs, c.done, !readNow)
}

// Close stops dialling and closes the store if it connected.
func (c *connecting) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	close(c.done)
	if s := c.current(); s != nil {
		return s.Close()
	}
	return nil
}
