package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/memory"
)

// memoryCollector exports a memory store's Stats; store labels which one
// ("memory" when it holds the counters, "fallback" for failure_mode local).
// One Stats call (which visits every shard) serves one scrape.
type memoryCollector struct {
	stores                           map[string]*memory.Store
	keys, capacity, evictions, swept *prometheus.Desc
	maxKeys                          int
}

func newMemoryCollector(maxKeys int, stores map[string]*memory.Store) *memoryCollector {
	l := []string{"store"}
	return &memoryCollector{
		stores:    stores,
		maxKeys:   maxKeys,
		keys:      prometheus.NewDesc("sluice_memory_store_keys", "Keys held by the in-process store.", l, nil),
		capacity:  prometheus.NewDesc("sluice_memory_store_max_keys", "The in-process store's key cap (--memory-max-keys).", l, nil),
		evictions: prometheus.NewDesc("sluice_memory_store_evictions_total", "Keys dropped at the cap before they were back in their fresh state (their counters restarted).", l, nil),
		swept:     prometheus.NewDesc("sluice_memory_store_swept_total", "Idle keys dropped because they were back in their fresh state (no decision changes).", l, nil),
	}
}

func (c *memoryCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.keys
	ch <- c.capacity
	ch <- c.evictions
	ch <- c.swept
}

func (c *memoryCollector) Collect(ch chan<- prometheus.Metric) {
	for name, s := range c.stores {
		st := s.Stats()
		ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(st.Keys), name)
		ch <- prometheus.MustNewConstMetric(c.capacity, prometheus.GaugeValue, float64(c.maxKeys), name)
		ch <- prometheus.MustNewConstMetric(c.evictions, prometheus.CounterValue, float64(st.Evictions), name)
		ch <- prometheus.MustNewConstMetric(c.swept, prometheus.CounterValue, float64(st.Swept), name)
	}
}

// detailedCollector exports how many detailed_metric label values are in
// use and how many decisions overflowed the cap.
type detailedCollector struct {
	engine          *service.Engine
	values, overflw *prometheus.Desc
}

func newDetailedCollector(e *service.Engine) *detailedCollector {
	return &detailedCollector{
		engine:  e,
		values:  prometheus.NewDesc("sluice_detailed_metric_values", "Label values created by detailed_metric rules (at most --max-detailed-metric-values).", nil, nil),
		overflw: prometheus.NewDesc("sluice_detailed_metric_overflow_total", "Decisions of detailed_metric rules counted under the rule's own label because the label-value cap was reached.", nil, nil),
	}
}

func (c *detailedCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.values
	ch <- c.overflw
}

func (c *detailedCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.values, prometheus.GaugeValue, float64(c.engine.DetailedMetricValues()))
	ch <- prometheus.MustNewConstMetric(c.overflw, prometheus.CounterValue, float64(c.engine.DetailedMetricOverflow()))
}
