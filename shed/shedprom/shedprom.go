// Package shedprom exposes a shed.Shedder's state as Prometheus metrics. It
// is apart from package shed so that shed stays free of Prometheus.
package shedprom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/shed"
)

// Collector is a prometheus.Collector over one Shedder; register it with
// prometheus.MustRegister(shedprom.New(s)). It reads Shedder.Stats at each
// scrape. Labels are bounded: priority is one of four classes, layer and
// outcome one of three.
//
//	sluice_shed_admitted_total{priority}              counter  requests admitted
//	sluice_shed_shed_total{layer, priority}           counter  requests shed (503)
//	sluice_shed_finished_total{outcome}               counter  admitted requests done: succeeded, dropped (the server failed them), ignored
//	sluice_shed_inflight                              gauge    admitted requests not yet done
//	sluice_shed_adaptive_limit                        gauge    the adaptive concurrency limit
//	sluice_shed_adaptive_min_rtt_seconds              gauge    the last measured unloaded latency
//	sluice_shed_adaptive_sample_seconds               gauge    the latency percentile of the last window
//	sluice_shed_adaptive_probing                      gauge    1 during a minRTT probe
//	sluice_shed_adaptive_dropped_ratio                gauge    the share of the last window's requests the server failed
//	sluice_shed_worker_utilization                    gauge    worker layer utilization (1 = full)
//	sluice_shed_worker_queue_delay_seconds            gauge    smoothed queueing delay
//	sluice_shed_worker_shedding                       gauge    highest class shed for queueing delay (0 none, 1 test … 3 default)
//	sluice_shed_fleet_capacity{mode}                  gauge    the fleet capacity configured (per window, or in flight)
//	sluice_shed_fleet_reserve_ratio                   gauge    the share of it reserved for critical requests
//	sluice_shed_fleet_window_seconds                  gauge    the fleet window (rate) or lease timeout (inflight)
//	sluice_shed_fleet_store_errors_total              counter  fleet store calls that failed
type Collector struct {
	s *shed.Shedder

	admitted, shedTotal, finished, inflight                 *prometheus.Desc
	limit, minRTT, sample, probing, dropped                 *prometheus.Desc
	util, queueDelay, shedding                              *prometheus.Desc
	fleetCapacity, fleetReserve, fleetWindow, fleetStoreErr *prometheus.Desc
}

// New returns a Collector for s.
func New(s *shed.Shedder) *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("sluice_shed_"+name, help, labels, nil)
	}
	return &Collector{
		s:             s,
		admitted:      d("admitted_total", "Requests admitted by the load shedder, by priority class.", "priority"),
		shedTotal:     d("shed_total", "Requests shed (503) by layer (worker_utilization, adaptive_concurrency, fleet_usage) and priority class.", "layer", "priority"),
		finished:      d("finished_total", "Requests admitted by the load shedder and done, by outcome: succeeded, dropped (failed by the server: 5xx, gRPC Unavailable…; not a latency sample), ignored (refused by the rate limits, abandoned, streams).", "outcome"),
		inflight:      d("inflight", "Requests admitted by the load shedder and not yet done."),
		limit:         d("adaptive_limit", "The adaptive concurrency limit (critical requests may use all of it, other classes their level of it)."),
		minRTT:        d("adaptive_min_rtt_seconds", "The unloaded latency the adaptive limiter last measured."),
		sample:        d("adaptive_sample_seconds", "The latency percentile of the adaptive limiter's last window."),
		probing:       d("adaptive_probing", "1 while the adaptive limiter measures the unloaded latency."),
		dropped:       d("adaptive_dropped_ratio", "Share of the adaptive limiter's last window of requests that the server failed (5xx, gRPC Unavailable…); above drop_ratio the limit falls."),
		util:          d("worker_utilization", "Worker utilization: the larger of in-flight / max_inflight and queueing delay / max_queue_delay."),
		queueDelay:    d("worker_queue_delay_seconds", "Smoothed queueing delay reported to the worker layer."),
		shedding:      d("worker_shedding", "Highest priority class shed for queueing delay: 0 none, 1 test, 2 sheddable, 3 default."),
		fleetCapacity: d("fleet_capacity", "Fleet capacity configured: requests per window (mode rate) or in flight (mode inflight).", "mode"),
		fleetReserve:  d("fleet_reserve_ratio", "Share of the fleet capacity reserved for critical requests."),
		fleetWindow:   d("fleet_window_seconds", "Fleet window (mode rate) or lease timeout (mode inflight)."),
		fleetStoreErr: d("fleet_store_errors_total", "Fleet layer store calls that failed (the request was then decided by fail_closed)."),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.admitted, c.shedTotal, c.finished, c.inflight, c.limit, c.minRTT, c.sample, c.probing,
		c.dropped, c.util, c.queueDelay, c.shedding, c.fleetCapacity, c.fleetReserve, c.fleetWindow, c.fleetStoreErr} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	m := func(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, t, v, labels...)
	}
	for _, p := range shed.Priorities() {
		m(c.admitted, prometheus.CounterValue, float64(st.Admitted[p]), p.String())
		for _, l := range []shed.Layer{shed.LayerWorker, shed.LayerAdaptive, shed.LayerFleet} {
			m(c.shedTotal, prometheus.CounterValue, float64(st.Shed[l][p]), l.String(), p.String())
		}
	}
	for o, n := range st.Finished {
		m(c.finished, prometheus.CounterValue, float64(n), shed.Outcome(o).String())
	}
	m(c.inflight, prometheus.GaugeValue, float64(st.InFlight))
	if a := st.Adaptive; a != nil {
		m(c.limit, prometheus.GaugeValue, float64(a.Limit))
		m(c.minRTT, prometheus.GaugeValue, a.MinRTT.Seconds())
		m(c.sample, prometheus.GaugeValue, a.Sample.Seconds())
		probing := 0.0
		if a.Probing {
			probing = 1
		}
		m(c.probing, prometheus.GaugeValue, probing)
		m(c.dropped, prometheus.GaugeValue, a.Dropped)
	}
	if w := st.Worker; w != nil {
		m(c.util, prometheus.GaugeValue, w.Utilization)
		m(c.queueDelay, prometheus.GaugeValue, w.QueueDelay.Seconds())
		m(c.shedding, prometheus.GaugeValue, float64(w.Shedding))
	}
	if f := st.Fleet; f != nil {
		m(c.fleetCapacity, prometheus.GaugeValue, float64(f.Capacity), f.Mode)
		m(c.fleetReserve, prometheus.GaugeValue, f.Reserve)
		m(c.fleetWindow, prometheus.GaugeValue, f.Window.Seconds())
		m(c.fleetStoreErr, prometheus.CounterValue, float64(st.FleetErrors))
	}
}
