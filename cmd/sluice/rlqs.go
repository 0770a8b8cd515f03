package main

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/server/rlqs"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/stack"
)

// registerRLQS serves Envoy's rate limit quota service on the gRPC server
// (docs/rlqs.md) and registers its metrics on reg. Buckets of rules are
// leased from the store stack (Redis's counters, or the memory store's).
func (s *server) registerRLQS(reg prometheus.Registerer, limits service.RequestBounds) error {
	un, err := rlqs.ParseUnmatched(s.cfg.Listen.RLQSUnmatched)
	if err != nil {
		return fmt.Errorf("--rlqs-unmatched: %w", err)
	}
	log := s.log.With("component", "rlqs")
	allotter, _ := s.store.(stack.Allotter)
	s.rlqs, err = rlqs.New(s.engine, s.watcher, rlqs.Options{Unmatched: un, RequestBounds: limits, Logger: log, Allotter: allotter,
		MaxStreamAge: s.cfg.Listen.RLQSMaxStreamAge, ReconnectGrace: s.cfg.Listen.RLQSReconnectGrace})
	if err != nil {
		return err
	}
	if allotter == nil {
		log.Warn("the store cannot lease: RLQS buckets of limited rules are denied", "store", fmt.Sprintf("%T", s.store))
	}
	reg.MustRegister(newRLQSCollector(s.rlqs))
	s.rlqs.Register(s.grpc)
	return nil
}

// rlqsCollector exports an RLQS server's Stats, one Stats call a scrape.
// Labels are bounded: action takes three values; no bucket, domain or
// Envoy identity becomes a label.
type rlqsCollector struct {
	srv                                               *rlqs.Server
	open, streams, reports, responses, assignments    *prometheus.Desc
	grants, units, allotErrors, abandoned, unleasable *prometheus.Desc
}

func newRLQSCollector(srv *rlqs.Server) *rlqsCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("sluice_rlqs_"+name, help, labels, nil)
	}
	return &rlqsCollector{
		srv:         srv,
		open:        d("streams_open", "RLQS streams open now."),
		streams:     d("streams_total", "RLQS streams opened."),
		reports:     d("reports_total", "RLQS usage-report messages received."),
		responses:   d("responses_total", "RLQS messages sent."),
		assignments: d("assignments_total", "RLQS quota assignments sent, by strategy: allow (ALLOW_ALL), deny (DENY_ALL), token_bucket (a lease).", "action"),
		grants:      d("grants_total", "Leases taken from the store for RLQS buckets."),
		units:       d("granted_units_total", "Units the RLQS leases took from the store."),
		allotErrors: d("allot_errors_total", "RLQS leases the store failed (Envoys keep their assignments until their TTLs end)."),
		abandoned:   d("abandoned_buckets_total", "RLQS buckets abandoned because no Envoy reported them."),
		unleasable:  d("unleasable_buckets_total", "RLQS buckets whose rule's limit cannot be leased with a bound (sliding_log, leaky_bucket, concurrency): denied."),
	}
}

func (c *rlqsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.open, c.streams, c.reports, c.responses, c.assignments, c.grants, c.units, c.allotErrors, c.abandoned, c.unleasable} {
		ch <- d
	}
}

func (c *rlqsCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.srv.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, float64(st.Open))
	counter(c.streams, st.Streams)
	counter(c.reports, st.Reports)
	counter(c.responses, st.Responses)
	for _, a := range rlqs.Actions() {
		counter(c.assignments, st.Assignments[a], a.String())
	}
	counter(c.grants, st.Grants)
	counter(c.units, st.GrantedUnits)
	counter(c.allotErrors, st.AllotErrors)
	counter(c.abandoned, st.Abandoned)
	counter(c.unleasable, st.Unleasable)
}
