package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/store/compose"
	"github.com/sluice-rl/sluice/store/hybrid"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/redis"
)

// newStack builds the store stack of `sluice serve` (store/compose) from
// its configuration: with --store redis, a Redis that does not answer at
// start is dialled in the background (each limit's failure mode applies
// meanwhile) instead of failing the start; one whose maxmemory-policy evicts
// Sluice's keys fails it, unless --redis-allow-eviction.
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
		c.MemoryWatch = cfg.Redis.MemoryWatch
	}
	st, err := compose.New(c)
	if errors.Is(err, redis.ErrEvictionPolicy) {
		return nil, fmt.Errorf("%w (sluice serve: --redis-allow-eviction, or SLUICE_REDIS_ALLOW_EVICTION=true)", err)
	}
	return st, err
}

// registerStackStats registers the metrics of a KindRedis stack's denied-key
// cache, hybrid store and Redis eviction on reg, read at each scrape.
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
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_hybrid_units_held",
				Help: "Units this instance holds in hybrid allotments that may still be spent: the \"plus units held\" of placement hybrid's bound (docs/stores.md), summed over keys."},
				func() float64 { units, _ := st.HybridHeld(); return float64(units) }),
		)
	}
	reg.MustRegister(evictionCollector{st: st}) // (registerStackStats is for KindRedis)
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_placement_undone_total",
			Help: "Ops given back because another placement of their request denied it."}, stat(func(s compose.Stats) uint64 { return s.Placed.Undone })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_placement_undo_failed_total",
			Help: "Ops whose give-back failed (their charge stayed)."}, stat(func(s compose.Stats) uint64 { return s.Placed.UndoFailed })),
	)
}

// Descriptions of the Redis eviction metrics (evictionCollector).
var (
	evictedKeysDesc = prometheus.NewDesc("sluice_redis_evicted_keys_total",
		"Keys the Redis node evicted since this instance began watching it (INFO stats evicted_keys, followed every 10s; any keys of the node, not only Sluice's). Any growth means limits may have admitted more than their quota.",
		[]string{"node"}, nil)
	policyDesc = prometheus.NewDesc("sluice_redis_maxmemory_policy",
		"1 for each Redis node and its maxmemory-policy (unknown: CONFIG and INFO refused, or the node did not answer); any but noeviction evicts Sluice's keys.",
		[]string{"node", "policy"}, nil)
)

// evictionCollector exports the stack's Redis eviction (compose.Eviction)
// at each scrape. Nodes are host:port, never the URL.
type evictionCollector struct{ st *compose.Stack }

func (evictionCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- evictedKeysDesc
	ch <- policyDesc
}

func (c evictionCollector) Collect(ch chan<- prometheus.Metric) {
	for _, n := range c.st.Eviction().Nodes {
		ch <- prometheus.MustNewConstMetric(evictedKeysDesc, prometheus.CounterValue, float64(n.EvictedKeys), n.Node)
		p := n.Policy
		if p == "" {
			p = "unknown"
		}
		ch <- prometheus.MustNewConstMetric(policyDesc, prometheus.GaugeValue, 1, n.Node, p)
	}
}

// allReadyNotes is /readyz's notes: the tenants' (readyNotes), then the
// Redis store's eviction.
func (s *server) allReadyNotes() []string {
	notes := s.readyNotes()
	if st, ok := s.store.(*compose.Stack); ok && s.cfg.Store.Kind == compose.KindRedis {
		notes = append(notes, evictionNotes(st.Eviction())...)
	}
	return notes
}

// evictionNotes is the /readyz line of the Redis nodes' eviction: "redis
// eviction: ok: …" or "redis eviction: at risk: …" with what is wrong; none
// before the first read. Node addresses are left out (/readyz is public);
// they are on /metrics and in the log.
func evictionNotes(e compose.Eviction) []string {
	if e.Checked.IsZero() {
		return nil
	}
	var evicting, unknown int
	for _, n := range e.Nodes {
		if n.Evicts {
			evicting++
		}
		if n.Policy == "" {
			unknown++
		}
	}
	evicted := e.Evicted()
	var b strings.Builder
	state := "ok"
	if evicting > 0 || unknown > 0 || evicted > 0 {
		state = "at risk"
	}
	fmt.Fprintf(&b, "redis eviction: %s: maxmemory-policy %s on %d node(s); %d keys evicted since this instance began watching",
		state, strings.Join(e.Policies(), ", "), len(e.Nodes), evicted)
	switch {
	case evicting > 0 && e.Allowed:
		fmt.Fprintf(&b, "; %d node(s) with a policy that evicts Sluice's keys, accepted by --redis-allow-eviction", evicting)
	case evicting > 0:
		fmt.Fprintf(&b, "; %d node(s) with a policy that evicts Sluice's keys since start (see the log): set noeviction", evicting)
	}
	if unknown > 0 {
		fmt.Fprintf(&b, "; policy of %d node(s) unreadable: check it is noeviction", unknown)
	}
	if evicted > 0 {
		b.WriteString("; limits whose counters were evicted admit more than their quota (docs/operations.md)")
	}
	return []string{b.String()}
}
