package shed

import (
	"math"
	"sync"
	"time"
)

// WorkerConfig configures a Worker. At least one of MaxInFlight and
// MaxQueueDelay must be set. Two signals, both measured:
//
//   - In flight: a request of class p is admitted while no more than
//     level(p) × MaxInFlight requests would then be in flight (Levels;
//     critical's level is 1). This is a count, checked per request, so it
//     needs no smoothing and cannot flap.
//   - Queueing delay, as reported with ObserveQueueDelay and smoothed: a
//     class starts being shed when the delay reaches level(p) ×
//     MaxQueueDelay, and stays shed until the delay has been below
//     (level(p) − Hysteresis) × MaxQueueDelay and at least Hold has passed
//     since shedding it began, so a busy server does not flap between
//     shedding and not. Shedding a class sheds every class below it; classes
//     come back one at a time, highest first. Critical work has no
//     hysteresis: it is refused only while the delay is at MaxQueueDelay.
type WorkerConfig struct {
	// MaxInFlight is the number of requests the process can work on at
	// once; 0 leaves in-flight out of the utilization.
	MaxInFlight int `yaml:"max_inflight" json:"max_inflight"`
	// MaxQueueDelay is the queueing delay that counts as full utilization;
	// 0 leaves queueing delay out. The delay is what the process measures and
	// reports with ObserveQueueDelay (time requests waited for a worker, or
	// the Go scheduler's latency from SchedLatency).
	MaxQueueDelay time.Duration `yaml:"max_queue_delay" json:"max_queue_delay"`
	// QueueDelaySmoothing: each reported queueing delay moves the average a
	// fifth of the way toward it, and while none is reported the average
	// decays toward zero with this time constant (a queue nobody reports on
	// is taken to have drained). Default 250ms.
	QueueDelaySmoothing time.Duration `yaml:"queue_delay_smoothing" json:"queue_delay_smoothing"`
	// Hysteresis is how far below its level utilization must fall before a
	// shed class is admitted again. In [0, 1). Default 0.1.
	Hysteresis float64 `yaml:"hysteresis" json:"hysteresis"`
	// Hold is the least time a class stays shed once shedding it began.
	// Default 1s.
	Hold time.Duration `yaml:"hold" json:"hold"`
}

// MaxWorkerInFlight bounds WorkerConfig.MaxInFlight.
const MaxWorkerInFlight = 10_000_000

func (c WorkerConfig) withDefaults() WorkerConfig {
	if c.QueueDelaySmoothing == 0 {
		c.QueueDelaySmoothing = 250 * time.Millisecond
	}
	if c.Hysteresis == 0 {
		c.Hysteresis = 0.1
	}
	if c.Hold == 0 {
		c.Hold = time.Second
	}
	return c
}

func (c WorkerConfig) validate(path string, errs *FieldErrors) {
	if c.MaxInFlight == 0 && c.MaxQueueDelay == 0 {
		errs.add(path, "set max_inflight, max_queue_delay or both")
	}
	if c.MaxInFlight < 0 || c.MaxInFlight > MaxWorkerInFlight {
		errs.add(path+".max_inflight", "%d is outside 0 … %d", c.MaxInFlight, MaxWorkerInFlight)
	}
	if c.MaxQueueDelay < 0 {
		errs.add(path+".max_queue_delay", "%v is negative", c.MaxQueueDelay)
	}
	if c.QueueDelaySmoothing <= 0 {
		errs.add(path+".queue_delay_smoothing", "%v must be positive", c.QueueDelaySmoothing)
	}
	if !(c.Hysteresis >= 0 && c.Hysteresis < 1) {
		errs.add(path+".hysteresis", "%v is outside [0, 1)", c.Hysteresis)
	}
	if c.Hold < 0 {
		errs.add(path+".hold", "%v is negative", c.Hold)
	}
}

// Worker is the worker utilization shedder of one process; see WorkerConfig.
// Create it with NewWorker; it is safe for concurrent use and reads no clock.
type Worker struct {
	cfg    WorkerConfig
	levels Levels

	mu       sync.Mutex
	inflight int // requires mu
	qd       float64
	qdAt     time.Time
	shedding Priority  // highest class being shed; Unspecified: none
	since    time.Time // when shedding of that class began
}

// NewWorker returns a Worker; it reports the configuration's problems. Zero
// levels take DefaultLevels.
func NewWorker(c WorkerConfig, levels Levels) (*Worker, error) {
	c = c.withDefaults()
	levels = levels.withDefaults()
	var errs FieldErrors
	c.validate("worker", &errs)
	levels.validate("levels", &errs)
	if err := errs.err(); err != nil {
		return nil, err
	}
	return &Worker{cfg: c, levels: levels}, nil
}

// ObserveQueueDelay reports that work waited d before a worker took it up, at
// time now. The Worker keeps an exponential moving average.
func (w *Worker) ObserveQueueDelay(now time.Time, d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.decayLocked(now)
	w.qd += 0.2 * (float64(d) - w.qd)
}

// decayLocked lets the average fall toward zero with time. Requires mu.
func (w *Worker) decayLocked(now time.Time) {
	if !w.qdAt.IsZero() && now.After(w.qdAt) {
		w.qd *= math.Exp(-float64(now.Sub(w.qdAt)) / float64(w.cfg.QueueDelaySmoothing))
	}
	w.qdAt = now
}

// utilization is the larger of the two signals. Requires mu.
func (w *Worker) utilization() float64 {
	var u float64
	if w.cfg.MaxInFlight > 0 {
		u = float64(w.inflight) / float64(w.cfg.MaxInFlight)
	}
	if w.cfg.MaxQueueDelay > 0 {
		u = max(u, w.qd/float64(w.cfg.MaxQueueDelay))
	}
	return u
}

// Admit admits a request of class p at time now (it then counts as in
// flight until Done), or refuses it.
func (w *Worker) Admit(now time.Time, p Priority) bool {
	p = p.norm()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cfg.MaxInFlight > 0 && float64(w.inflight+1) > w.levels.of(p)*float64(w.cfg.MaxInFlight)+1e-9 {
		return false
	}
	if w.cfg.MaxQueueDelay > 0 {
		w.decayLocked(now)
		u := w.qd / float64(w.cfg.MaxQueueDelay)
		w.updateLocked(now, u)
		if p == Critical && u >= 1 || p != Critical && p <= w.shedding {
			return false
		}
	}
	w.inflight++
	return true
}

// updateLocked moves the shed class up to every class whose level the
// queueing delay's utilization u has reached, and down one class at a time once u is below the shed class's
// level minus the hysteresis and the hold has passed. Requires mu.
func (w *Worker) updateLocked(now time.Time, u float64) {
	for _, p := range [...]Priority{Default, Sheddable, Test} {
		if p <= w.shedding {
			break
		}
		if u >= w.levels.of(p)-1e-9 {
			w.shedding, w.since = p, now
			return
		}
	}
	for w.shedding != Unspecified && u < w.levels.of(w.shedding)-w.cfg.Hysteresis && now.Sub(w.since) >= w.cfg.Hold {
		w.shedding--
		w.since = now
	}
}

// Done ends a request Admit admitted.
func (w *Worker) Done() {
	w.mu.Lock()
	w.inflight--
	w.mu.Unlock()
}

// WorkerStats is a snapshot of a Worker.
type WorkerStats struct {
	// InFlight is the number of admitted requests not yet done.
	InFlight int
	// QueueDelay is the moving average of reported queueing delays.
	QueueDelay time.Duration
	// Utilization is the larger of in-flight / MaxInFlight and queueing
	// delay / MaxQueueDelay.
	Utilization float64
	// Shedding is the highest class being shed for queueing delay (with
	// every class below it); Unspecified when none is.
	Shedding Priority
}

// Stats returns a snapshot at time now.
func (w *Worker) Stats(now time.Time) WorkerStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.decayLocked(now)
	return WorkerStats{InFlight: w.inflight, QueueDelay: time.Duration(w.qd), Utilization: w.utilization(), Shedding: w.shedding}
}
