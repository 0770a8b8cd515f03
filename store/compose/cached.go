package compose

import (
	"time"

	"context"
	"errors"
	"fmt"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/hybrid"
	"github.com/sluice-rl/sluice/store/stack"
)

// global is what the Redis side of a stack offers: decisions, allotments,
// key listings, and whether it is a Cluster.
type global interface {
	stack.Allotter
	stack.KeyLister
	Cluster() bool
}

// ErrNoAllotter: the store under a layer that forwards stack.Allotter
// leases no allotments.
var ErrNoAllotter = errors.New("compose: the store leases no allotments")

// cached puts the denied-key cache (hybrid.Denied) in front of next for
// Takes, unless the shared store g is a Redis Cluster (whose refunds of
// cross-slot batches can free quota before a denial's RetryAfter) and the
// cache was not forced on. Everything else a layer may be asked for goes
// to next (key listings, allotments) or to g (node health, invalidations,
// reset announcements, claims),
// so that the cache hides nothing from the engine.
type cached struct {
	cache  *hybrid.Denied
	next   sluice.Store
	g      global
	always bool
}

func newCached(next sluice.Store, g global, always bool, opts hybrid.DeniedOptions) *cached {
	return &cached{cache: hybrid.NewDenied(next, opts), next: next, g: g, always: always}
}

// on reports whether Takes of ops go through the cache now: not when the
// shared store is a Cluster (unless forced), nor for a batch with an op
// that costs more than its limit can ever admit (the store answers
// sluice.ReasonCostTooHigh, where a denial remembered at a lower cost
// would say "limited" and give a RetryAfter).
func (c *cached) on(ops []sluice.Op) bool {
	if !c.always && c.g.Cluster() {
		return false
	}
	for i := range ops {
		if ops[i].Cost > stack.Capacity(ops[i].Limit) {
			return false
		}
	}
	return true
}

// Take implements sluice.Store.
func (c *cached) Take(ctx context.Context, ops []sluice.Op, results []sluice.Result) error {
	if c.on(ops) {
		return c.cache.Take(ctx, ops, results)
	}
	return c.next.Take(ctx, ops, results)
}

// Keys implements stack.KeyLister with next's, or fails with an error
// wrapping stack.ErrNoKeyLister.
func (c *cached) Keys(ctx context.Context, prefix string, max int) ([]string, bool, error) {
	kl, ok := c.next.(stack.KeyLister)
	if !ok {
		return nil, false, fmt.Errorf("compose: %T: %w", c.next, stack.ErrNoKeyLister)
	}
	return kl.Keys(ctx, prefix, max)
}

// Allot implements stack.Allotter with next's, or fails with an error
// wrapping ErrNoAllotter.
func (c *cached) Allot(ctx context.Context, reqs []stack.AllotRequest, out []stack.Allotment) error {
	a, ok := c.next.(stack.Allotter)
	if !ok {
		return fmt.Errorf("compose: %T: %w", c.next, ErrNoAllotter)
	}
	return a.Allot(ctx, reqs, out)
}

// Health implements stack.HealthReporter with the shared store's nodes.
func (c *cached) Health() []stack.NodeHealth {
	if hr, ok := c.g.(stack.HealthReporter); ok {
		return hr.Health()
	}
	return nil
}

// Invalidations implements stack.Invalidator with the shared store's.
func (c *cached) Invalidations(ctx context.Context, fn func(keys []string, all bool)) error {
	return invalidations(c.g, ctx, fn)
}

// Resets implements stack.ResetAnnouncer with the shared store's.
func (c *cached) Resets(ctx context.Context, fn func(keys []string, all bool)) error {
	return resets(c.g, ctx, fn)
}

// Stats returns the cache's counters.
func (c *cached) Stats() hybrid.DeniedStats { return c.cache.Stats() }

// Claim implements stack.Claimer with the shared store's (a claim is the
// fleet's, whatever store decides the counter: a hybrid store's counters
// live in it too), or fails with an error wrapping stack.ErrNoClaimer.
func (c *cached) Claim(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	if c.g == nil {
		return claim(c.next, ctx, key, ttl)
	}
	return claim(c.g, ctx, key, ttl)
}
