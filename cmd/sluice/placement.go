package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/hybrid"
	"github.com/sluice-rl/sluice/store/redis"
)

// globalStore is what the Redis side of `sluice serve` offers: decisions,
// allotments, and whether it is a Cluster (*redis.Store, connectingStore).
type globalStore interface {
	sluice.Allotter
	Cluster() bool
}

// placedRedis builds the store of `sluice serve --store redis`: rules placed
// global go to Redis, hybrid ones to a hybrid store over it, local ones to
// the in-process store local; both Redis paths pass through the denied-key
// cache when cfg enables it, following g's announcements of refunds and
// resets (sluice.Invalidator) so that one done through any instance frees
// the key on every instance. It registers the metrics of the cache and the
// hybrid store on reg and returns what must be closed (the caches stop
// following, the hybrid store gives back its allotments).
func placedRedis(g globalStore, local sluice.Store, cfg redisConfig, reg prometheus.Registerer) (sluice.Store, io.Closer, error) {
	h, err := hybrid.New(g, hybrid.Options{Horizon: cfg.HybridHorizon})
	if err != nil {
		return nil, nil, err
	}
	var global, hyb sluice.Store = g, h
	var closer io.Closer = h
	if cfg.DeniedCache != "off" {
		inv, _ := g.(sluice.Invalidator)
		dg := hybrid.NewDenied(g, hybrid.DeniedOptions{Invalidator: inv})
		dh := hybrid.NewDenied(h, hybrid.DeniedOptions{Invalidator: inv})
		closer = closerFunc(func() error {
			dg.Close()
			dh.Close()
			return h.Close()
		})
		global = &clusterGate{on: dg, off: g, g: g, always: cfg.DeniedCache == "on"}
		hyb = &clusterGate{on: dh, off: h, g: g, always: cfg.DeniedCache == "on"}
		hits := func() float64 { return float64(dg.Stats().Hits + dh.Stats().Hits) }
		keys := func() float64 { return float64(dg.Stats().Keys + dh.Stats().Keys) }
		reg.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_denied_cache_hits_total",
				Help: "Ops denied from the denied-key cache without a store call."}, hits),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_denied_cache_keys",
				Help: "Denials held by the denied-key cache."}, keys),
		)
	}
	st := func(f func(hybrid.Stats) uint64) func() float64 {
		return func() float64 { return float64(f(h.Stats())) }
	}
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_hybrid_local_total",
			Help: "Ops of placement hybrid decided from local allotments."}, st(func(s hybrid.Stats) uint64 { return s.Local })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_hybrid_global_total",
			Help: "Ops of placement hybrid decided by the global store."}, st(func(s hybrid.Stats) uint64 { return s.Global })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_hybrid_allotments_total",
			Help: "Allotment requests sent to the global store."}, st(func(s hybrid.Stats) uint64 { return s.Allots })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_hybrid_units_voided_total",
			Help: "Allotted units that expired unspent."}, st(func(s hybrid.Stats) uint64 { return s.Voided })),
	)
	return &service.Placed{Global: global, Hybrid: hyb, Local: local}, closer, nil
}

// clusterGate uses the denied-key cache unless the global store is a Redis
// Cluster (whose refunds of cross-slot batches can free quota before a
// denial's RetryAfter) and the cache was not forced on.
type clusterGate struct {
	on, off sluice.Store
	g       globalStore
	always  bool
}

func (c *clusterGate) Take(ctx context.Context, ops []sluice.Op, results []sluice.Result) error {
	if c.always || !c.g.Cluster() {
		return c.on.Take(ctx, ops, results)
	}
	return c.off.Take(ctx, ops, results)
}

// Keys lists the keys of the store behind the cache (sluice.KeyLister), so
// that tenant resets and usage work through it.
func (c *clusterGate) Keys(ctx context.Context, prefix string, max int) ([]string, bool, error) {
	kl, ok := c.off.(sluice.KeyLister)
	if !ok {
		return nil, false, fmt.Errorf("store %T: %w", c.off, service.ErrNoKeyLister)
	}
	return kl.Keys(ctx, prefix, max)
}

// Invalidations follows the real store's announcements once connected
// (sluice.Invalidator); until then there is nothing to hear, and the first
// thing heard once connected is to drop everything.
func (c *connectingStore) Invalidations(ctx context.Context, fn func(keys []string, all bool)) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		if s := c.current(); s != nil {
			return s.Invalidations(ctx, fn)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.done:
			return redis.ErrClosed
		case <-t.C:
		}
	}
}

// Allot passes to the real store once connected, else fails.
func (c *connectingStore) Allot(ctx context.Context, reqs []sluice.AllotRequest, out []sluice.Allotment) error {
	s := c.current()
	if s == nil {
		return errNotConnected
	}
	return s.Allot(ctx, reqs, out)
}

// Cluster reports whether the connected store is a Redis Cluster; true
// (the cautious answer for the denied-key cache) until connected.
func (c *connectingStore) Cluster() bool {
	s := c.current()
	return s == nil || s.Cluster()
}

// Health reports the global store's nodes, so that the cache in front of
// it hides nothing from the engine and /metrics.
func (c *clusterGate) Health() []sluice.NodeHealth {
	if hr, ok := c.g.(sluice.HealthReporter); ok {
		return hr.Health()
	}
	return nil
}
