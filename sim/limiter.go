package sim

import (
	"unsafe"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/algorithm"
)

// limiter is the state of one key under one algorithm, stepped through the
// algorithm package's own functions: the simulator has no arithmetic of its
// own for deciding.
type limiter interface {
	// take steps the state at now with cost and keeps the new state.
	take(now, cost int64) algorithm.Decision
	// bytes is the size of the state the algorithm keeps now.
	bytes() int
}

// simulated lists the algorithms the simulator runs. Concurrency is not a rate
// over a window (its window is a lease timeout), so it has no exact answer to
// compare with and is left out.
var simulated = []sluice.Algorithm{
	sluice.TokenBucket, sluice.GCRA, sluice.LeakyBucket,
	sluice.FixedWindow, sluice.SlidingWindow, sluice.SlidingLog,
}

// newLimiter returns a fresh key's state for a, or nil if a is not simulated.
// log is a reusable backing array for sliding_log.
func newLimiter(a sluice.Algorithm, p algorithm.Params, log []algorithm.Entry) limiter {
	switch a {
	case sluice.TokenBucket:
		return &stepper[algorithm.TokenState]{p: p, step: algorithm.TokenBucket}
	case sluice.GCRA:
		return &stepper[int64]{p: p, step: algorithm.GCRA}
	case sluice.LeakyBucket:
		return &stepper[int64]{p: p, step: algorithm.LeakyBucket}
	case sluice.FixedWindow:
		return &stepper[algorithm.WindowState]{p: p, step: algorithm.FixedWindow}
	case sluice.SlidingWindow:
		return &stepper[algorithm.WindowState]{p: p, step: algorithm.SlidingWindow}
	case sluice.SlidingLog:
		return &slidingLog{stepper[[]algorithm.Entry]{p: p, s: log[:0], step: algorithm.SlidingLog}}
	}
	return nil
}

// stepper is one key's state S, stepped by an algorithm function.
type stepper[S any] struct {
	p    algorithm.Params
	s    S
	step func(s S, now, cost int64, p algorithm.Params) (S, algorithm.Decision)
}

func (l *stepper[S]) take(now, cost int64) (d algorithm.Decision) {
	l.s, d = l.step(l.s, now, cost, l.p)
	return d
}

func (l *stepper[S]) bytes() int { return int(unsafe.Sizeof(l.s)) }

// slidingLog is the stepper of sliding_log, whose state grows with the hits
// it logs.
type slidingLog struct {
	stepper[[]algorithm.Entry]
}

// bytes counts the slice header and the entries in use.
func (l *slidingLog) bytes() int {
	return int(unsafe.Sizeof(l.s)) + len(l.s)*int(unsafe.Sizeof(algorithm.Entry{}))
}

// meterQuota is the quota of a count-every-hit limiter: far above any count a
// run produces, far below overflow.
const meterQuota = 1 << 50

// meter counts the units admitted in the trailing window (now − w, now]: a
// sliding-window log kept by the simulator as the exact reference. It is
// deliberately not algorithm.SlidingLog, so that comparing sliding_log with it
// checks the algorithm rather than the harness against itself.
type meter struct {
	w    int64
	ev   []Event // oldest first, from head
	head int
	sum  int64
}

func newMeter(w int64) meter { return meter{w: w} }

func (m *meter) reset() { m.ev, m.head, m.sum = m.ev[:0], 0, 0 }

// add records cost units at now (times must not decrease) and returns the
// units in (now − w, now], cost included. cost 0 only looks.
func (m *meter) add(now, cost int64) int64 {
	for m.head < len(m.ev) && m.ev[m.head].At <= now-m.w {
		m.sum -= m.ev[m.head].Cost
		m.head++
	}
	if m.head > 1024 && m.head > len(m.ev)/2 {
		n := copy(m.ev, m.ev[m.head:])
		m.ev, m.head = m.ev[:n], 0
	}
	if cost > 0 {
		m.ev = append(m.ev, Event{At: now, Cost: cost})
		m.sum += cost
	}
	return m.sum
}
