package main

import (
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/store/compose"
	"github.com/sluice-rl/sluice/store/hybrid"
	"github.com/sluice-rl/sluice/store/memory"
)

// newStack builds the store stack of `sluice serve` (store/compose) from
// its configuration: with --store redis, a Redis that does not answer at
// start is dialled in the background (each limit's failure mode applies
// meanwhile) instead of failing the start.
func newStack(cfg storeConfig, redisTLS *tls.Config, mem memory.Options, now func() time.Time, log *slog.Logger) (*compose.Stack, error) {
	c := compose.DefaultConfig()
	c.Kind, c.Memory, c.Logger = cfg.Kind, mem, log
	if cfg.Kind == compose.KindRedis {
		ropts, err := redisOptions(cfg.Redis, now)
		if err != nil {
			return nil, err
		}
		ropts.TLS = redisTLS
		c.Redis, c.Background = ropts, true
		c.Denied = cfg.Redis.DeniedCache
		c.Hybrid = hybrid.Options{Horizon: cfg.Redis.HybridHorizon}
	}
	return compose.New(c)
}

// registerStackStats registers the metrics of the stack's denied-key cache
// and hybrid store on reg, read from Stack.Stats at each scrape.
func registerStackStats(reg prometheus.Registerer, st *compose.Stack) {
	stat := func(f func(compose.Stats) uint64) func() float64 {
		return func() float64 { return float64(f(st.Stats())) }
	}
	s := st.Stats()
	if s.DeniedCache {
		reg.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_denied_cache_hits_total",
				Help: "Ops denied from the denied-key cache without a store call."}, stat(func(s compose.Stats) uint64 { return s.Denied.Hits })),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_denied_cache_keys",
				Help: "Denials held by the denied-key cache."}, stat(func(s compose.Stats) uint64 { return uint64(s.Denied.Keys) })),
		)
	}
	if s.HybridStore {
		reg.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_hybrid_local_total",
				Help: "Ops of placement hybrid decided from local allotments."}, stat(func(s compose.Stats) uint64 { return s.Hybrid.Local })),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_hybrid_global_total",
				Help: "Ops of placement hybrid decided by the global store."}, stat(func(s compose.Stats) uint64 { return s.Hybrid.Global })),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_hybrid_allotments_total",
				Help: "Allotment requests sent to the global store."}, stat(func(s compose.Stats) uint64 { return s.Hybrid.Allots })),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_hybrid_units_voided_total",
				Help: "Allotted units that expired unspent or that a reset voided."}, stat(func(s compose.Stats) uint64 { return s.Hybrid.Voided })),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_hybrid_resets_total",
				Help: "Keys whose allotment a reset voided (a reset through this instance, or announced by another)."}, stat(func(s compose.Stats) uint64 { return s.Hybrid.Resets })),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_hybrid_reset_flushes_total",
				Help: "Times every allotment was voided because reset announcements may have been missed (the Redis subscription lost or confirmed)."}, stat(func(s compose.Stats) uint64 { return s.Hybrid.ResetFlushes })),
		)
	}
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_placement_undone_total",
			Help: "Ops given back because another placement of their request denied it."}, stat(func(s compose.Stats) uint64 { return s.Placed.Undone })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_placement_undo_failed_total",
			Help: "Ops whose give-back failed (their charge stayed)."}, stat(func(s compose.Stats) uint64 { return s.Placed.UndoFailed })),
	)
}
