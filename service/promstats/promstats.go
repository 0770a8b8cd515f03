// Package promstats keeps a Sluice engine's metrics in Prometheus: Metrics
// implements service.Metrics, and also records rule reloads
// (ObserveReload) and, with NewHealthCollector, the store's per-node
// breaker state. It is the only part of Sluice that imports the Prometheus
// client, so a program that embeds the engine without it links none.
package promstats

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/store/stack"
)

// The outcome label values, as the engine reports them (service.Outcome*).
var outcomes = [...]string{"allowed", "denied", "shadow_denied", "failed_open", "failed_closed", "local_allowed", "local_denied", "quota_denied"}

// outcomeIndex returns the index of an outcome in outcomes, or -1.
func outcomeIndex(o string) int {
	for i, name := range outcomes {
		if name == o {
			return i
		}
	}
	return -1
}

// Metrics are the engine's Prometheus metrics. Create them with New; one
// Metrics may serve one Engine. All methods are safe for concurrent use.
// The collectors are exported for tests and for custom registration.
//
//	sluice_decisions_total{domain, rule, outcome}   counter  one per descriptor decided by a rule
//	sluice_near_limit_total{domain, rule}           counter  allowed hits past the near-limit ratio of the limit
//	sluice_check_duration_seconds                   histogram  Engine.Check latency
//	sluice_store_errors_total{reason}               counter  error, timeout, breaker_open
//	sluice_checks_abandoned_total                   counter  checks whose caller gave up before the store answered
//	sluice_tier_decisions_total{tier, outcome}      counter  decisions of tenants' rules by tier (quota use by tier)
//	sluice_charged_units_total{domain, action}      counter  units charged or asked back after the fact (charge, refund)
//	sluice_counters_reset_total{domain}             counter  counters reset (admin reset)
//	sluice_rule_reloads_total{result}               counter  success, failure
//	sluice_rules_last_reload_success                gauge    1 if the last reload succeeded
//	sluice_rules_last_reload_timestamp_seconds      gauge    time of the last successful load
//	sluice_rules_reload_held{reason}                gauge    1 while a reload is held for reason
//	sluice_rules_reload_held_total{reason}          counter  reloads held, by reason
type Metrics struct {
	Decisions   *prometheus.CounterVec
	NearLimit   *prometheus.CounterVec
	Duration    prometheus.Histogram
	StoreErrors *prometheus.CounterVec
	Abandons    prometheus.Counter
	Tiers       *prometheus.CounterVec
	Charged     *prometheus.CounterVec
	Resets      *prometheus.CounterVec
	Reloads     *prometheus.CounterVec
	ReloadTime  prometheus.Gauge
	ReloadOK    prometheus.Gauge
	Held        *prometheus.GaugeVec
	HeldTotal   *prometheus.CounterVec
}

// holdReasons are the reason label values of the held-reload metrics
// (rules.HoldDomainRemoved, rules.HoldRuleInUse).
var holdReasons = [...]string{"domain_removed", "rule_in_use"}

// New creates the metrics and registers them with reg (nil: not
// registered, useful in tests). It panics if reg already holds metrics of the
// same names, as prometheus.MustRegister does: that is a wiring mistake found
// at start.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Decisions: counterVec("sluice_decisions_total",
			"Descriptor decisions by domain, rule and outcome (allowed, denied, shadow_denied, failed_open, failed_closed, local_allowed, local_denied, quota_denied).",
			"domain", "rule", "outcome"),
		NearLimit: counterVec("sluice_near_limit_total",
			"Allowed descriptor hits that used more than the near-limit ratio of their limit.", "domain", "rule"),
		Duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_check_duration_seconds",
			Help:    "Time to decide one check request, store call included.",
			Buckets: []float64{25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1},
		}),
		StoreErrors: counterVec("sluice_store_errors_total",
			"Check requests the store did not decide, by reason (error, timeout, breaker_open).", "reason"),
		Abandons: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_checks_abandoned_total",
			Help: "Checks whose caller's context ended before the store answered (backpressure, not a store failure)."}),
		Tiers: counterVec("sluice_tier_decisions_total",
			"Decisions of tenants' rules by the tenant's tier (free, pro, enterprise, custom) and outcome.", "tier", "outcome"),
		Charged: counterVec("sluice_charged_units_total",
			"Units charged (action charge) or asked back (action refund) after the fact, by domain (POST /v1/charge, the middleware's cost hook).", "domain", "action"),
		Resets: counterVec("sluice_counters_reset_total",
			"Counters reset by domain (POST /admin/v1/reset).", "domain"),
		Reloads: counterVec("sluice_rule_reloads_total", "Rule directory reloads by result (success, failure).", "result"),
		ReloadOK: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_rules_last_reload_success",
			Help: "1 if the last rule reload succeeded (the rules in force are the files on disk), 0 if it failed."}),
		ReloadTime: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_rules_last_reload_timestamp_seconds",
			Help: "Unix time of the last successful rule load."}),
		Held: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_rules_reload_held",
			Help: "1 while a rule reload is held back by the removal guard for this reason (domain_removed, rule_in_use): the rules in force are not the files on disk."}, []string{"reason"}),
		HeldTotal: counterVec("sluice_rules_reload_held_total", "Rule reloads held back by the removal guard, by reason.", "reason"),
	}
	for _, r := range holdReasons {
		m.Held.WithLabelValues(r)
		m.HeldTotal.WithLabelValues(r)
	}
	for _, r := range []string{"error", "timeout", "breaker_open"} {
		m.StoreErrors.WithLabelValues(r)
	}
	m.Reloads.WithLabelValues("success")
	m.Reloads.WithLabelValues("failure")
	m.ReloadOK.Set(1)
	m.ReloadTime.SetToCurrentTime()
	if reg != nil {
		reg.MustRegister(m.Decisions, m.NearLimit, m.Duration, m.StoreErrors, m.Abandons, m.Tiers, m.Charged, m.Resets, m.Reloads, m.ReloadOK, m.ReloadTime, m.Held, m.HeldTotal)
	}
	return m
}

func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// Rule implements service.Metrics: the recorder holds the rule's series,
// created now, so that every rule has them from the start.
func (m *Metrics) Rule(domain, rule string) func(outcome string, near bool) {
	var byOutcome [len(outcomes)]prometheus.Counter
	for i, o := range outcomes {
		byOutcome[i] = m.Decisions.WithLabelValues(domain, rule, o)
	}
	nearC := m.NearLimit.WithLabelValues(domain, rule)
	return func(outcome string, near bool) {
		if i := outcomeIndex(outcome); i >= 0 {
			byOutcome[i].Inc()
		} else {
			m.Decisions.WithLabelValues(domain, rule, outcome).Inc()
		}
		if near {
			nearC.Inc()
		}
	}
}

// DropRule implements service.Metrics.
func (m *Metrics) DropRule(domain, rule string) {
	for _, o := range outcomes {
		m.Decisions.DeleteLabelValues(domain, rule, o)
	}
	m.NearLimit.DeleteLabelValues(domain, rule)
}

// Decision implements service.Metrics.
func (m *Metrics) Decision(domain, rule, outcome string, near bool) {
	m.Decisions.WithLabelValues(domain, rule, outcome).Inc()
	if near {
		m.NearLimit.WithLabelValues(domain, rule).Inc()
	}
}

// StoreError implements service.Metrics.
func (m *Metrics) StoreError(reason string) { m.StoreErrors.WithLabelValues(reason).Inc() }

// Abandoned implements service.Metrics.
func (m *Metrics) Abandoned() { m.Abandons.Inc() }

// Tier implements service.Metrics. Its labels are bounded: 4 tiers, 7
// outcomes.
func (m *Metrics) Tier(tier, outcome string) { m.Tiers.WithLabelValues(tier, outcome).Inc() }

// Adjusted implements service.Metrics. Its labels are bounded: domains the
// rule files declare, and 2 actions.
func (m *Metrics) Adjusted(domain, action string, n uint64) {
	if action == "reset" {
		m.Resets.WithLabelValues(domain).Add(float64(n))
		return
	}
	m.Charged.WithLabelValues(domain, action).Add(float64(n))
}

// CheckDuration implements service.Metrics.
func (m *Metrics) CheckDuration(d time.Duration) { m.Duration.Observe(d.Seconds()) }

// ObserveReload records one rule reload. Its signature fits
// watch.Watcher.OnReload: w.OnReload = m.ObserveReload.
func (m *Metrics) ObserveReload(ok bool, _ error) {
	if ok {
		m.Reloads.WithLabelValues("success").Inc()
		m.ReloadOK.Set(1)
		m.ReloadTime.Set(float64(time.Now().UnixNano()) / 1e9)
		return
	}
	m.Reloads.WithLabelValues("failure").Inc()
	m.ReloadOK.Set(0)
}

// ObserveHold records the outcome of a rule load under the removal guard:
// the reasons it was held for (rules.Hold.Reasons), or none when it was
// applied. Reasons other than domain_removed and rule_in_use are ignored.
func (m *Metrics) ObserveHold(reasons []string) {
	for _, r := range holdReasons {
		held := false
		for _, x := range reasons {
			held = held || x == r
		}
		if held {
			m.Held.WithLabelValues(r).Set(1)
			m.HeldTotal.WithLabelValues(r).Inc()
		} else {
			m.Held.WithLabelValues(r).Set(0)
		}
	}
}

// breakerStates are the values of sluice_store_breaker_state.
var breakerStates = map[string]float64{"closed": 0, "half-open": 1, "open": 2}

// healthCollector exports a store's per-node health at each scrape.
type healthCollector struct {
	hr   stack.HealthReporter
	desc *prometheus.Desc
}

// NewHealthCollector returns a collector of
//
//	sluice_store_breaker_state{node}   gauge  0 closed, 1 half-open, 2 open
//
// read from hr at each scrape: one series per store node (host:port). Register
// it when the store implements stack.HealthReporter.
func NewHealthCollector(hr stack.HealthReporter) prometheus.Collector {
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
