package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Event is one hit of one key: Cost units at At microseconds after the start
// of the run.
type Event struct {
	At   int64
	Cost int64
}

// Kind names a workload generator.
type Kind string

// The workload generators. Rates are relative to the limit: Load 1 offers,
// on average, exactly Quota units per Window to each key.
const (
	// Poisson: hits arrive as a Poisson process at Load × the limit.
	Poisson Kind = "poisson"
	// OnOff: bursty traffic; on periods (exponential, mean Window/4) offer
	// Load × 4 × the limit, off periods (exponential, mean 3 × Window/4) offer
	// nothing, so the mean is Load.
	OnOff Kind = "onoff"
	// Boundary: an attacker offers Quota hits in the last twentieth of a
	// window and Quota more in the first twentieth of the next, at every other
	// window boundary (Load is ignored).
	Boundary Kind = "boundary"
	// Recovery: one burst of 2 × Quota hits at once, a quarter into the run
	// plus a random phase within one window, then evenly spaced hits at Load × the limit; the run reports how long
	// after the burst the last hit was denied.
	Recovery Kind = "recovery"
	// Zipf: Keys keys share Poisson traffic whose total is Load × the limit ×
	// Keys; key k (from 1) gets a share proportional to 1/k^Skew, so the
	// first keys run far over their limit and the tail far under it.
	Zipf Kind = "zipf"
	// Diurnal: Poisson traffic whose rate follows a day-like ramp over the
	// run: from 0.1 × Load up to 2 × Load at mid-run and back (a raised
	// cosine), mean ≈ 1.05 × Load.
	Diurnal Kind = "diurnal"
	// Trace: hits replayed from a recorded file (see ParseTrace).
	Trace Kind = "trace"
)

// Workload describes the traffic of one run. The zero value is not valid.
type Workload struct {
	Kind Kind
	// Load is the offered rate per key relative to the limit (see Kind).
	Load float64
	// Keys is the number of keys (independent streams; Zipf splits one
	// stream among them).
	Keys int
	// Duration is how long the run lasts on the simulated clock.
	Duration time.Duration
	// Skew is the Zipf exponent (Zipf only; 0 means 1.1).
	Skew float64
	// Trace holds the recorded hits (Trace only).
	Trace *TraceData
}

// String describes the workload in a few words.
func (w Workload) String() string {
	switch w.Kind {
	case Boundary:
		return "boundary attack"
	case Trace:
		return "trace"
	case Zipf:
		return fmt.Sprintf("zipf %d keys %.2g×", w.Keys, w.Load)
	}
	return fmt.Sprintf("%s %.2g×", w.Kind, w.Load)
}

// keys returns the number of key streams.
func (w Workload) keys() int {
	if w.Kind == Trace && w.Trace != nil {
		return len(w.Trace.Keys)
	}
	return max(w.Keys, 1)
}

// events appends the hits of key k, in time order, to buf. burst is the
// instant of the Recovery burst, or −1. quota and window (µs) are the limit's.
//
// zipfTotal is zipfNorm(Keys, skew), computed once per run by the caller.
func (w Workload) events(k int, r *rand.Rand, quota, window int64, zipfTotal float64, buf []Event) (ev []Event, burst int64) {
	dur := w.Duration.Microseconds()
	rate := float64(quota) / float64(window) // hits per µs at Load 1
	burst = -1
	switch w.Kind {
	case Poisson:
		buf = poisson(buf, r, 0, dur, w.Load*rate)
	case Zipf:
		buf = poisson(buf, r, 0, dur, w.Load*rate*float64(w.Keys)*(math.Pow(float64(k+1), -w.skew())/zipfTotal))
	case OnOff:
		on, off := float64(window)/4, 3*float64(window)/4
		for t := r.ExpFloat64() * off; t < float64(dur); {
			end := min(t+r.ExpFloat64()*on, float64(dur))
			buf = poisson(buf, r, int64(t), int64(end), 4*w.Load*rate)
			t = end + r.ExpFloat64()*off
		}
	case Diurnal:
		// Thinning: draw at the peak rate, keep with probability rate(t)/peak.
		peak := 2 * w.Load * rate
		for t := r.ExpFloat64() / peak; t < float64(dur); t += r.ExpFloat64() / peak {
			f := 0.1/2 + (1-0.1/2)*(1-math.Cos(2*math.Pi*t/float64(dur)))/2
			if r.Float64() < f {
				buf = append(buf, Event{At: int64(t), Cost: 1})
			}
		}
	case Boundary:
		edge := window / 20
		for b := 2 * window; b+edge <= dur; b += 2 * window {
			buf = spread(buf, b-edge, edge, quota)
			buf = spread(buf, b, edge, quota)
		}
	case Recovery:
		// Each key's burst falls at its own phase within a window, so the
		// window algorithms are seen at every offset from their boundaries.
		burst = dur/4 + r.Int64N(window)
		for range 2 * quota {
			buf = append(buf, Event{At: burst, Cost: 1})
		}
		if w.Load > 0 {
			gap := int64(float64(window) / (w.Load * float64(quota)))
			for t := burst + gap; t < dur; t += gap {
				buf = append(buf, Event{At: t, Cost: 1})
			}
		}
	case Trace:
		if w.Trace != nil && k < len(w.Trace.Events) {
			shift := w.Trace.Origin % window
			if shift < 0 {
				shift += window
			}
			for _, e := range w.Trace.Events[k] {
				buf = append(buf, Event{At: e.At + shift, Cost: e.Cost})
			}
		}
	}
	return buf, burst
}

func (w Workload) skew() float64 {
	if w.Skew == 0 {
		return 1.1
	}
	return w.Skew
}

// poisson appends the arrivals of a Poisson process of rate per µs in
// [from, to).
func poisson(buf []Event, r *rand.Rand, from, to int64, rate float64) []Event {
	if rate <= 0 {
		return buf
	}
	for t := float64(from) + r.ExpFloat64()/rate; t < float64(to); t += r.ExpFloat64() / rate {
		buf = append(buf, Event{At: int64(t), Cost: 1})
	}
	return buf
}

// spread appends n unit hits evenly over [from, from+span).
func spread(buf []Event, from, span, n int64) []Event {
	for i := range n {
		buf = append(buf, Event{At: from + i*span/n, Cost: 1})
	}
	return buf
}

// zipfNorm is the sum of 1/i^s for i from 1 to n: key k (from 0) gets the
// share (k+1)^−s / zipfNorm of Zipf traffic.
func zipfNorm(n int, s float64) float64 {
	var total float64
	for i := 1; i <= n; i++ {
		total += math.Pow(float64(i), -s)
	}
	return total
}

// expectedHits estimates the hits of the busiest key and of the whole run.
func (w Workload) expectedHits(quota, window int64) (perKey, total float64) {
	if w.Kind == Trace {
		if w.Trace == nil {
			return 0, 0
		}
		return 0, float64(w.Trace.Hits)
	}
	windows := float64(w.Duration.Microseconds()) / float64(window)
	mean := w.Load * float64(quota) * windows
	keys := float64(w.keys())
	switch w.Kind {
	case Diurnal:
		mean *= 1.1
	case Boundary:
		mean = float64(quota) * windows
	case Recovery:
		mean += 2 * float64(quota)
	case Zipf:
		return mean * keys / zipfNorm(w.keys(), w.skew()), mean * keys
	}
	return mean, mean * keys
}
