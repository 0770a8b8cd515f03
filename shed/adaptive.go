package shed

import (
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"
)

// AdaptiveConfig configures an Adaptive limiter. Zero fields take the
// defaults in DefaultAdaptiveConfig.
//
// The controller, every SampleWindow: sample = the Percentile of the
// latencies of requests that finished in the window; gradient =
// minRTT × (1 + Tolerance) / sample, clamped to [0.5, 2]; limit ← (1 −
// Smoothing) × limit + Smoothing × limit × gradient, clamped to
// [MinLimit, MaxLimit]. So the limit rises (by up to Tolerance a window)
// while latency stays within Tolerance of the unloaded minimum, and falls as
// soon as queueing shows. It never rises while less than half of it is used.
//
// Only Succeeded requests are latency samples. A Dropped request (the
// server failed it: a 5xx, a gRPC Unavailable) is not: a backend failing in
// a millisecond would otherwise look unloaded and have its limit raised
// just as it fails. Instead, a window in which more than DropRatio of the
// finished requests were dropped takes the gradient 0.5 (the limit falls).
// Ignored requests (refused before they ran, abandoned) only free their
// place.
//
// minRTT, the unloaded latency, is measured by a probe: for ProbeSamples
// succeeded requests the limit of non-critical work drops to MinLimit, so
// nothing queues, and minRTT becomes the Percentile of their latencies. A
// probe runs at the start, every ProbeInterval (± ProbeJitter), and at once
// whenever the limit falls to MinLimit (the old minRTT is then suspect: a
// slower backend, not a longer queue). Critical work keeps the limit it had
// during a probe.
type AdaptiveConfig struct {
	// InitialLimit is the limit after the first probe. Default 20.
	InitialLimit int `yaml:"initial_limit" json:"initial_limit"`
	// MinLimit is the floor of the limit, and the concurrency of a probe.
	// Default 4.
	MinLimit int `yaml:"min_limit" json:"min_limit"`
	// MaxLimit is the ceiling of the limit. Default 1000.
	MaxLimit int `yaml:"max_limit" json:"max_limit"`
	// SampleWindow is how long latencies are gathered before the limit is
	// recomputed. Default 100ms.
	SampleWindow time.Duration `yaml:"sample_window" json:"sample_window"`
	// MinSamples is how many finished requests (succeeded or dropped) a
	// window needs; a window with fewer is extended. Default 10.
	MinSamples int `yaml:"min_samples" json:"min_samples"`
	// Percentile of a window's latencies that is compared with minRTT, in
	// (0, 1]. Default 0.5: the median shrugs off the odd slow request (a
	// garbage collection, a busy host) that a high percentile would take
	// for queueing.
	Percentile float64 `yaml:"percentile" json:"percentile"`
	// Tolerance is how far above minRTT latency may go before the limit
	// falls, as a fraction of minRTT. Default 0.25.
	Tolerance float64 `yaml:"tolerance" json:"tolerance"`
	// Smoothing is the weight of a new value of the limit against the old,
	// in (0, 1]; 1 is no smoothing. Default 0.2: the limit moves at most
	// 10% down (or 5% up, with the default Tolerance) a window, so one noisy
	// window does not halve it.
	Smoothing float64 `yaml:"smoothing" json:"smoothing"`
	// DropRatio: a window in which more than this fraction of the finished
	// requests were Dropped lowers the limit by the largest step latency
	// can (gradient 0.5), whatever the latency of the rest. In (0, 1];
	// 1 turns the signal off (dropped requests are then only kept out of
	// the latency samples). Default 0.1: a backend failing in earnest
	// loses concurrency, one with a steady trickle of errors (a broken
	// endpoint) does not.
	DropRatio float64 `yaml:"drop_ratio" json:"drop_ratio"`
	// ProbeInterval is how often minRTT is measured again. Default 30s.
	ProbeInterval time.Duration `yaml:"probe_interval" json:"probe_interval"`
	// ProbeJitter spreads probes of a fleet apart: each interval is drawn
	// from ProbeInterval × (1 ± ProbeJitter). In [0, 1). Default 0.1.
	ProbeJitter float64 `yaml:"probe_jitter" json:"probe_jitter"`
	// ProbeSamples is how many latencies a probe gathers. Default 25.
	ProbeSamples int `yaml:"probe_samples" json:"probe_samples"`
	// Seed seeds the jitter and the sampling of latencies; zero picks a
	// fixed seed (results are reproducible for a given request sequence).
	Seed uint64 `yaml:"-" json:"-"`
}

// DefaultAdaptiveConfig holds the defaults of AdaptiveConfig.
var DefaultAdaptiveConfig = AdaptiveConfig{
	InitialLimit:  20,
	MinLimit:      4,
	MaxLimit:      1000,
	SampleWindow:  100 * time.Millisecond,
	MinSamples:    10,
	Percentile:    0.5,
	Tolerance:     0.25,
	Smoothing:     0.2,
	DropRatio:     0.1,
	ProbeInterval: 30 * time.Second,
	ProbeJitter:   0.1,
	ProbeSamples:  25,
}

// MaxAdaptiveLimit bounds AdaptiveConfig.MaxLimit.
const MaxAdaptiveLimit = 1_000_000

func (c AdaptiveConfig) withDefaults() AdaptiveConfig {
	d := DefaultAdaptiveConfig
	setI := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	setD := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	setF := func(v *float64, def float64) {
		if *v == 0 {
			*v = def
		}
	}
	setI(&c.MinLimit, d.MinLimit)
	setI(&c.MaxLimit, max(d.MaxLimit, c.MinLimit))
	setI(&c.InitialLimit, min(max(d.InitialLimit, c.MinLimit), c.MaxLimit))
	setD(&c.SampleWindow, d.SampleWindow)
	setI(&c.MinSamples, d.MinSamples)
	setF(&c.Percentile, d.Percentile)
	setF(&c.Tolerance, d.Tolerance)
	setF(&c.Smoothing, d.Smoothing)
	setF(&c.DropRatio, d.DropRatio)
	setD(&c.ProbeInterval, d.ProbeInterval)
	setF(&c.ProbeJitter, d.ProbeJitter)
	setI(&c.ProbeSamples, d.ProbeSamples)
	return c
}

// validate reports the problems of a defaulted configuration under path.
func (c AdaptiveConfig) validate(path string, errs *FieldErrors) {
	if c.MinLimit < 1 {
		errs.add(path+".min_limit", "%d must be at least 1", c.MinLimit)
	}
	if c.MaxLimit < c.MinLimit || c.MaxLimit > MaxAdaptiveLimit {
		errs.add(path+".max_limit", "%d is outside min_limit (%d) … %d", c.MaxLimit, c.MinLimit, MaxAdaptiveLimit)
	}
	if c.InitialLimit < c.MinLimit || c.InitialLimit > c.MaxLimit {
		errs.add(path+".initial_limit", "%d is outside min_limit … max_limit (%d … %d)", c.InitialLimit, c.MinLimit, c.MaxLimit)
	}
	if c.SampleWindow < time.Millisecond {
		errs.add(path+".sample_window", "%v is shorter than 1ms", c.SampleWindow)
	}
	if c.MinSamples < 1 || c.MinSamples > maxSamples {
		errs.add(path+".min_samples", "%d is outside 1 … %d", c.MinSamples, maxSamples)
	}
	if !(c.Percentile > 0 && c.Percentile <= 1) {
		errs.add(path+".percentile", "%v is outside (0, 1]", c.Percentile)
	}
	if !(c.Tolerance > 0 && c.Tolerance <= 10) {
		errs.add(path+".tolerance", "%v is outside (0, 10]", c.Tolerance)
	}
	if !(c.Smoothing > 0 && c.Smoothing <= 1) {
		errs.add(path+".smoothing", "%v is outside (0, 1]", c.Smoothing)
	}
	if !(c.DropRatio > 0 && c.DropRatio <= 1) {
		errs.add(path+".drop_ratio", "%v is outside (0, 1]", c.DropRatio)
	}
	if c.ProbeInterval < c.SampleWindow {
		errs.add(path+".probe_interval", "%v is shorter than sample_window %v", c.ProbeInterval, c.SampleWindow)
	}
	if !(c.ProbeJitter >= 0 && c.ProbeJitter < 1) {
		errs.add(path+".probe_jitter", "%v is outside [0, 1)", c.ProbeJitter)
	}
	if c.ProbeSamples < 1 || c.ProbeSamples > maxSamples {
		errs.add(path+".probe_samples", "%d is outside 1 … %d", c.ProbeSamples, maxSamples)
	}
}

// maxSamples is how many latencies a window keeps (a uniform sample of them
// when more finish), which bounds the memory and the sort of a window.
const maxSamples = 512

// Adaptive is a concurrency limit that finds its own value from observed
// latency; see AdaptiveConfig for the algorithm. Each class p may use up to
// its level × the limit (Levels); critical work may use all of it.
//
// Create it with NewAdaptive; it is safe for concurrent use. Its methods take
// the time as a parameter: it reads no clock.
type Adaptive struct {
	cfg    AdaptiveConfig
	levels Levels

	mu       sync.Mutex
	limit    float64 // requires mu
	inflight int
	minRTT   time.Duration
	probing  bool
	preProbe float64 // limit before the probe began
	epoch    uint64  // bumped when a probe starts or ends; samples of older epochs are dropped
	next     time.Time
	started  bool

	winStart    time.Time
	maxInflight int
	n           int // latencies seen in this window (or probe)
	dropped     int // Dropped requests in this window
	samples     []time.Duration
	rng         uint64

	lastSample   time.Duration
	lastGradient float64
	lastDropped  float64
}

// NewAdaptive returns a limiter; it reports the configuration's problems.
// Zero levels take DefaultLevels.
func NewAdaptive(c AdaptiveConfig, levels Levels) (*Adaptive, error) {
	c = c.withDefaults()
	levels = levels.withDefaults()
	var errs FieldErrors
	c.validate("adaptive", &errs)
	levels.validate("levels", &errs)
	if err := errs.err(); err != nil {
		return nil, err
	}
	seed := c.Seed
	if seed == 0 {
		seed = 0x9e3779b97f4a7c15
	}
	return &Adaptive{cfg: c, levels: levels, limit: float64(c.InitialLimit), rng: seed,
		samples: make([]time.Duration, 0, maxSamples)}, nil
}

// Token is an admitted request's hold on the limiter; give it back with Done.
type Token struct {
	start time.Time
	epoch uint64
	ok    bool
}

// Acquire admits a request of class p at time now, or refuses it (ok false)
// when the class's share of the limit is in use.
func (a *Adaptive) Acquire(now time.Time, p Priority) (t Token, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.started {
		a.started = true
		a.startProbe(now)
	} else if !a.probing && !now.Before(a.next) {
		a.startProbe(now)
	}
	if a.inflight >= a.capLocked(p) {
		return Token{}, false
	}
	a.inflight++
	a.maxInflight = max(a.maxInflight, a.inflight)
	return Token{start: now, epoch: a.epoch, ok: true}, true
}

// capLocked is how many requests may be in flight when one of class p is
// admitted. Requires mu.
func (a *Adaptive) capLocked(p Priority) int {
	limit := a.limit
	if a.probing {
		if p.norm() == Critical {
			return max(int(a.preProbe), a.cfg.MinLimit)
		}
		limit = float64(a.cfg.MinLimit)
	}
	return max(1, int(math.Floor(a.levels.of(p)*limit+1e-9)))
}

// Outcome is what a finished request says about the capacity behind a
// limiter. The zero value is Ignored.
type Outcome uint8

const (
	// Ignored: the request says nothing about capacity: refused before it
	// ran (a 429), abandoned by its client, or a stream (whose length is
	// not a latency). It only frees its place.
	Ignored Outcome = iota
	// Succeeded: the server did the work and answered (a 2xx, 3xx, or 4xx
	// other than 429; a gRPC status other than those of Dropped). Its
	// latency is a sample.
	Succeeded
	// Dropped: the server failed the request (a 5xx, gRPC Unavailable,
	// Internal, DataLoss) or took longer than its caller's deadline. Its
	// latency is not a sample: a failure is often fast and would make an
	// ailing server look unloaded. A window with too many of them lowers
	// the limit (AdaptiveConfig.DropRatio).
	Dropped
)

// NumOutcomes is the length of arrays indexed by Outcome.
const NumOutcomes = int(Dropped) + 1

var outcomeNames = [NumOutcomes]string{Ignored: "ignored", Succeeded: "succeeded", Dropped: "dropped"}

// String returns "ignored", "succeeded" or "dropped".
func (o Outcome) String() string {
	if int(o) < NumOutcomes {
		return outcomeNames[o]
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// OutcomeOf classifies a finished request for a transport. ctxErr is its
// context's Err when it ended; failed says the server failed it (a 5xx, a
// gRPC Unavailable or Internal); refused says it was refused before it ran
// (a 429, gRPC ResourceExhausted, a refusal by the rate limits). A refused
// request, or one whose client went away (context.Canceled), is Ignored;
// one that ran past its deadline (context.DeadlineExceeded) or failed is
// Dropped; the rest Succeeded.
func OutcomeOf(ctxErr error, failed, refused bool) Outcome {
	switch {
	case refused:
		return Ignored
	case errors.Is(ctxErr, context.DeadlineExceeded):
		return Dropped
	case ctxErr != nil:
		return Ignored
	case failed:
		return Dropped
	}
	return Succeeded
}

// Done gives back t at time now, with the request's outcome (see Outcome).
// Done on a zero Token does nothing.
func (a *Adaptive) Done(t Token, now time.Time, o Outcome) {
	if !t.ok {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.inflight--
	if t.epoch != a.epoch {
		return
	}
	switch {
	case o == Succeeded:
		a.addSample(now.Sub(t.start))
	case o == Dropped && !a.probing:
		a.dropped++ // a probe needs latencies; drops do not end it
	default:
		return
	}
	switch {
	case a.probing:
		if a.n >= a.cfg.ProbeSamples {
			a.endProbe(now)
		}
	case a.n+a.dropped >= a.cfg.MinSamples && now.Sub(a.winStart) >= a.cfg.SampleWindow:
		a.update(now)
	}
}

// addSample keeps a uniform sample of at most maxSamples latencies
// (reservoir sampling). Requires mu.
func (a *Adaptive) addSample(d time.Duration) {
	a.n++
	if len(a.samples) < maxSamples {
		a.samples = append(a.samples, d)
		return
	}
	if j := a.rand() % uint64(a.n); j < maxSamples {
		a.samples[j] = d
	}
}

// rand is xorshift64*. Requires mu.
func (a *Adaptive) rand() uint64 {
	a.rng ^= a.rng >> 12
	a.rng ^= a.rng << 25
	a.rng ^= a.rng >> 27
	return a.rng * 2685821657736338717
}

// percentile returns the configured percentile of the samples. Requires mu.
func (a *Adaptive) percentile() time.Duration {
	slices.Sort(a.samples)
	i := int(math.Ceil(a.cfg.Percentile*float64(len(a.samples)))) - 1
	return a.samples[max(i, 0)]
}

func (a *Adaptive) resetWindow(now time.Time) {
	a.winStart = now
	a.n, a.dropped = 0, 0
	a.samples = a.samples[:0]
	a.maxInflight = a.inflight
}

// startProbe pins non-critical work to MinLimit until ProbeSamples requests
// admitted from now on have finished. Requires mu.
func (a *Adaptive) startProbe(now time.Time) {
	a.probing = true
	a.preProbe = a.limit
	a.epoch++
	a.resetWindow(now)
}

// endProbe sets minRTT from the probe's samples. Requires mu.
func (a *Adaptive) endProbe(now time.Time) {
	a.minRTT = max(a.percentile(), time.Microsecond)
	a.lastSample = a.minRTT
	a.probing = false
	a.limit = max(a.preProbe, float64(a.cfg.MinLimit)) // restore limit from before the probe
	a.epoch++
	jitter := 1 + a.cfg.ProbeJitter*(2*float64(a.rand()>>11)/(1<<53)-1)
	a.next = now.Add(time.Duration(float64(a.cfg.ProbeInterval) * jitter))
	a.resetWindow(now)
}

// update recomputes the limit from the window's latencies and drops.
// Requires mu.
func (a *Adaptive) update(now time.Time) {
	finished := a.n + a.dropped
	a.lastDropped = float64(a.dropped) / float64(finished)
	g := 1.0
	switch {
	case a.lastDropped > a.cfg.DropRatio:
		g = 0.5 // failing: back off by the largest step, whatever the latency says
	case a.n > 0:
		sample := a.percentile()
		target := float64(a.minRTT) * (1 + a.cfg.Tolerance)
		g = min(max(target/float64(sample), 0.5), 2)
		a.lastSample = sample
	}
	if g > 1 && float64(a.maxInflight) < a.limit/2 {
		g = 1 // demand, not capacity, bounds the use: nothing learned about more
	}
	next := (1-a.cfg.Smoothing)*a.limit + a.cfg.Smoothing*a.limit*g
	a.limit = min(max(next, float64(a.cfg.MinLimit)), float64(a.cfg.MaxLimit))
	a.lastGradient = g
	if a.limit <= float64(a.cfg.MinLimit) && g < 1 {
		a.startProbe(now) // at the floor and still slow or failing: measure the baseline again
		return
	}
	a.resetWindow(now)
}

// AdaptiveStats is a snapshot of an Adaptive limiter.
type AdaptiveStats struct {
	// Limit is the current limit (critical work's share; the other classes
	// get their level of it). During a probe it is the limit before it.
	Limit int
	// InFlight is the number of requests holding a Token.
	InFlight int
	// MinRTT is the last measured unloaded latency; zero before the first
	// probe has ended.
	MinRTT time.Duration
	// Sample is the latency percentile of the last window.
	Sample time.Duration
	// Gradient is the last gradient (1 before the first update).
	Gradient float64
	// Dropped is the fraction of the last window's finished requests that
	// were Dropped, in [0, 1].
	Dropped float64
	// Probing reports whether a probe is under way.
	Probing bool
}

// Stats returns a snapshot.
func (a *Adaptive) Stats() AdaptiveStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := AdaptiveStats{Limit: int(a.limit), InFlight: a.inflight, MinRTT: a.minRTT, Sample: a.lastSample,
		Gradient: a.lastGradient, Dropped: a.lastDropped, Probing: a.probing}
	if a.probing {
		s.Limit = int(a.preProbe)
	}
	if s.Gradient == 0 {
		s.Gradient = 1
	}
	return s
}
