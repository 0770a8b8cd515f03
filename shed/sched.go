package shed

import (
	"context"
	"runtime/metrics"
	"time"
)

// schedMetric is the Go runtime's histogram of the time goroutines spent
// runnable before they ran: in a Go server, the queue in front of the CPUs.
const schedMetric = "/sched/latencies:seconds"

// SchedLatency reports the Go scheduler's latency to w as queueing delay,
// every interval until ctx ends: the given percentile (for example 0.99) of
// the time goroutines waited for a CPU during the interval. It is the
// measured queue of a CPU-bound Go process; a process with its own work
// queue should report that queue's waits with ObserveQueueDelay instead.
// Run it in its own goroutine.
func SchedLatency(ctx context.Context, w *Worker, interval time.Duration, percentile float64) {
	s := []metrics.Sample{{Name: schedMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return // not this runtime
	}
	prev := append([]uint64(nil), s[0].Value.Float64Histogram().Counts...)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			metrics.Read(s)
			h := s[0].Value.Float64Histogram()
			if d, ok := deltaPercentile(h.Buckets, prev, h.Counts, percentile); ok {
				w.ObserveQueueDelay(now, d)
			}
			prev = append(prev[:0], h.Counts...)
		}
	}
}

// deltaPercentile returns the percentile of the samples counted between
// prev and cur, from the histogram's bucket boundaries (seconds; bucket i
// spans buckets[i] … buckets[i+1]), taking a bucket's upper bound. ok is
// false when nothing was counted.
func deltaPercentile(buckets []float64, prev, cur []uint64, percentile float64) (time.Duration, bool) {
	if len(prev) != len(cur) || len(buckets) != len(cur)+1 {
		return 0, false
	}
	var total uint64
	for i := range cur {
		total += cur[i] - prev[i]
	}
	if total == 0 {
		return 0, false
	}
	rank := uint64(percentile*float64(total) + 0.5)
	rank = min(max(rank, 1), total)
	var seen uint64
	for i := range cur {
		seen += cur[i] - prev[i]
		if seen >= rank {
			upper := buckets[i+1]
			if upper > 3600 { // the last bucket is open (+Inf): take its lower bound
				upper = buckets[i]
			}
			return time.Duration(upper * float64(time.Second)), true
		}
	}
	return 0, false
}
