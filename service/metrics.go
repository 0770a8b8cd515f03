package service

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice"
)

// Outcomes, the values of the outcome label of sluice_decisions_total.
const (
	// OutcomeAllowed: the store admitted the hit (or the rule is unlimited).
	OutcomeAllowed = "allowed"
	// OutcomeDenied: the store denied the hit.
	OutcomeDenied = "denied"
	// OutcomeShadowDenied: the rule would have denied, but is in shadow mode.
	OutcomeShadowDenied = "shadow_denied"
	// OutcomeFailedOpen: the store failed and the failure mode allowed.
	OutcomeFailedOpen = "failed_open"
	// OutcomeFailedClosed: the store failed and the failure mode denied.
	OutcomeFailedClosed = "failed_closed"
	// OutcomeLocalAllowed: the store failed and the local fallback admitted.
	OutcomeLocalAllowed = "local_allowed"
	// OutcomeLocalDenied: the store failed and the local fallback denied.
	OutcomeLocalDenied = "local_denied"
)

const (
	outAllowed = iota
	outDenied
	outShadowDenied
	outFailedOpen
	outFailedClosed
	outLocalAllowed
	outLocalDenied
	numOutcomes
)

var outcomeNames = [numOutcomes]string{
	OutcomeAllowed, OutcomeDenied, OutcomeShadowDenied, OutcomeFailedOpen,
	OutcomeFailedClosed, OutcomeLocalAllowed, OutcomeLocalDenied,
}

// Metrics are the engine's Prometheus metrics. Create them with NewMetrics;
// one Metrics may serve one Engine. All methods are safe for concurrent use.
//
// Label values are bounded by the rule files: domain is a domain some rule
// file declares, rule a rule ID (or "override" for limits given in the
// request). Descriptor values from requests become label values only for
// rules with detailed_metric: true, whose rule label is then the request's
// entries ("tenant=acme.route=/x").
type Metrics struct {
	decisions   *prometheus.CounterVec
	nearLimit   *prometheus.CounterVec
	duration    prometheus.Histogram
	storeErrors *prometheus.CounterVec
	abandoned   prometheus.Counter
	reloads     *prometheus.CounterVec
	reloadTime  prometheus.Gauge
	reloadOK    prometheus.Gauge
}

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered, useful in tests). It panics if reg already holds metrics of the
// same names, as prometheus.MustRegister does: that is a wiring mistake found
// at start.
//
//	sluice_decisions_total{domain, rule, outcome}   counter  one per descriptor decided by a rule
//	sluice_near_limit_total{domain, rule}           counter  allowed hits past NearLimitRatio of the limit
//	sluice_check_duration_seconds                   histogram  Engine.Check latency
//	sluice_store_errors_total{reason}               counter  error, timeout, breaker_open
//	sluice_checks_abandoned_total                   counter  checks whose caller gave up before the store answered
//	sluice_rule_reloads_total{result}               counter  success, failure
//	sluice_rules_last_reload_success                gauge    1 if the last reload succeeded
//	sluice_rules_last_reload_timestamp_seconds      gauge    time of the last successful load
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_decisions_total",
			Help: "Descriptor decisions by domain, rule and outcome (allowed, denied, shadow_denied, failed_open, failed_closed, local_allowed, local_denied).",
		}, []string{"domain", "rule", "outcome"}),
		nearLimit: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_near_limit_total",
			Help: "Allowed descriptor hits that used more than the near-limit ratio of their limit.",
		}, []string{"domain", "rule"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_check_duration_seconds",
			Help:    "Time to decide one check request, store call included.",
			Buckets: []float64{25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1},
		}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_store_errors_total",
			Help: "Check requests the store did not decide, by reason (error, timeout, breaker_open).",
		}, []string{"reason"}),
		abandoned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_checks_abandoned_total",
			Help: "Checks whose caller's context ended before the store answered (backpressure, not a store failure).",
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_rule_reloads_total",
			Help: "Rule directory reloads by result (success, failure).",
		}, []string{"result"}),
		reloadOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_rules_last_reload_success",
			Help: "1 if the last rule reload succeeded (the rules in force are the files on disk), 0 if it failed.",
		}),
		reloadTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_rules_last_reload_timestamp_seconds",
			Help: "Unix time of the last successful rule load.",
		}),
	}
	for _, r := range []string{"error", "timeout", "breaker_open"} {
		m.storeErrors.WithLabelValues(r)
	}
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("failure")
	m.reloadOK.Set(1)
	m.reloadTime.SetToCurrentTime()
	if reg != nil {
		reg.MustRegister(m.decisions, m.nearLimit, m.duration, m.storeErrors, m.abandoned, m.reloads, m.reloadOK, m.reloadTime)
	}
	return m
}

// ObserveReload records one rule reload. Its signature fits
// watch.Watcher.OnReload: w.OnReload = m.ObserveReload.
func (m *Metrics) ObserveReload(ok bool, _ error) {
	if ok {
		m.reloads.WithLabelValues("success").Inc()
		m.reloadOK.Set(1)
		m.reloadTime.Set(float64(time.Now().UnixNano()) / 1e9)
		return
	}
	m.reloads.WithLabelValues("failure").Inc()
	m.reloadOK.Set(0)
}

// breakerStates are the values of sluice_store_breaker_state.
var breakerStates = map[string]float64{"closed": 0, "half-open": 1, "open": 2}

// healthCollector exports a store's per-node health at each scrape.
type healthCollector struct {
	hr   sluice.HealthReporter
	desc *prometheus.Desc
}

// NewHealthCollector returns a collector of
//
//	sluice_store_breaker_state{node}   gauge  0 closed, 1 half-open, 2 open
//
// read from hr at each scrape: one series per store node (host:port). Register
// it when the store implements sluice.HealthReporter.
func NewHealthCollector(hr sluice.HealthReporter) prometheus.Collector {
	return &healthCollector{hr: hr, desc: prometheus.NewDesc("sluice_store_breaker_state",
		"State of the circuit breaker of each store node: 0 closed, 1 half-open, 2 open.", []string{"node"}, nil)}
}

// Describe implements prometheus.Collector.
func (c *healthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *healthCollector) Collect(ch chan<- prometheus.Metric) {
	for _, n := range c.hr.Health() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, breakerStates[n.State], n.Node)
	}
}
