package shed

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice"
)

// Config configures a Shedder: each layer is on when its section is set.
// A Config with no layer is valid and sheds nothing (it still classifies).
//
//	priority: {default: default, routes: [{prefix: /admin/, default: critical}, {prefix: /checkout, max: critical}]}
//	levels: {test: 0.5, sheddable: 0.7, default: 0.9}
//	worker: {max_inflight: 200, max_queue_delay: 50ms}
//	adaptive: {min_limit: 4, max_limit: 500, probe_interval: 30s}
//	fleet: {mode: rate, capacity: 5000, window: 1s, reserve: 0.1}
type Config struct {
	// Priority gives requests their class.
	Priority PriorityConfig `yaml:"priority" json:"priority"`
	// Levels are the per-class levels of the worker and adaptive layers.
	Levels Levels `yaml:"levels" json:"levels"`
	// Worker turns on the worker utilization shedder.
	Worker *WorkerConfig `yaml:"worker" json:"worker"`
	// Adaptive turns on the adaptive concurrency limiter.
	Adaptive *AdaptiveConfig `yaml:"adaptive" json:"adaptive"`
	// Fleet turns on the fleet usage shedder; it needs a store.
	Fleet *FleetConfig `yaml:"fleet" json:"fleet"`
}

// Validate returns nil, or FieldErrors listing every problem of c (with its
// defaults applied). hasStore says whether a store will be given to New.
func (c Config) Validate(hasStore bool) error {
	var errs FieldErrors
	c.Priority.validate("priority", &errs)
	c.Levels.withDefaults().validate("levels", &errs)
	if c.Worker != nil {
		c.Worker.withDefaults().validate("worker", &errs)
	}
	if c.Adaptive != nil {
		c.Adaptive.withDefaults().validate("adaptive", &errs)
	}
	if c.Fleet != nil {
		c.Fleet.withDefaults().validate("fleet", &errs)
		if !hasStore {
			errs.add("fleet", "needs a store shared by the fleet")
		}
	}
	return errs.err()
}

// Shedder runs the layers of a Config in order: worker, adaptive, fleet
// (the two local layers first, so a request they shed costs no store call).
// It is safe for concurrent use.
type Shedder struct {
	classifier *Classifier
	worker     *Worker
	adaptive   *Adaptive
	fleet      *Fleet
	now        func() time.Time
	onError    func(error)

	admitted  [NumPriorities]atomic.Uint64
	shed      [NumLayers][NumPriorities]atomic.Uint64
	finished  [NumOutcomes]atomic.Uint64
	fleetErrs atomic.Uint64
	inflight  atomic.Int64
}

// Options are a Shedder's collaborators.
type Options struct {
	// Store keeps the fleet's counters (the same store as the rate limits,
	// typically Redis). Required with Config.Fleet.
	Store sluice.Store
	// Now is the clock of the local layers; nil means time.Now.
	Now func() time.Time
	// OnError hears about fleet store failures (for logs); nil ignores them.
	// They are counted in Stats either way.
	OnError func(error)
}

// New returns a Shedder; it reports the configuration's problems as
// FieldErrors.
func New(c Config, o Options) (*Shedder, error) {
	if err := c.Validate(o.Store != nil); err != nil {
		return nil, err
	}
	s := &Shedder{now: o.Now, onError: o.OnError}
	if s.now == nil {
		s.now = time.Now
	}
	var err error
	if s.classifier, err = NewClassifier(c.Priority); err != nil {
		return nil, err
	}
	if c.Worker != nil {
		if s.worker, err = NewWorker(*c.Worker, c.Levels); err != nil {
			return nil, err
		}
	}
	if c.Adaptive != nil {
		if s.adaptive, err = NewAdaptive(*c.Adaptive, c.Levels); err != nil {
			return nil, err
		}
	}
	if c.Fleet != nil {
		if s.fleet, err = NewFleet(*c.Fleet, o.Store); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Classify returns the class of a request on route whose caller asked for
// claimed; see Route.
func (s *Shedder) Classify(route, claimed string) Priority {
	return s.classifier.Classify(route, claimed)
}

// Worker returns the worker layer, or nil when it is off; a process reports
// its queueing delay to it with ObserveQueueDelay.
func (s *Shedder) Worker() *Worker { return s.worker }

// Ticket is an admitted request's hold on the shedder. Call Done exactly once
// when the request is over.
type Ticket struct {
	s      *Shedder
	worker bool
	tok    Token
	lease  FleetLease
}

// Admit decides whether a request of class p goes on. It returns a Ticket,
// or a Refusal saying which layer shed the request. A request refused by one
// layer holds nothing in the others.
func (s *Shedder) Admit(ctx context.Context, p Priority) (Ticket, *Refusal) {
	p = p.norm()
	var now time.Time
	if s.worker != nil || s.adaptive != nil {
		now = s.now()
	}
	t := Ticket{s: s}
	if s.worker != nil {
		if !s.worker.Admit(now, p) {
			return s.refuse(&Refusal{Layer: LayerWorker, Priority: p, RetryAfter: time.Second,
				Detail: "this server is busy; " + p.String() + " requests are shed until it is not"})
		}
		t.worker = true
	}
	if s.adaptive != nil {
		tok, ok := s.adaptive.Acquire(now, p)
		if !ok {
			t.release(context.WithoutCancel(ctx), now, Ignored)
			return s.refuse(&Refusal{Layer: LayerAdaptive, Priority: p, RetryAfter: time.Second,
				Detail: "the concurrency limit this server learned from its latency is reached for " + p.String() + " requests"})
		}
		t.tok = tok
	}
	if s.fleet != nil {
		lease, refused, err := s.fleet.Admit(ctx, p)
		if err != nil {
			s.fleetErrs.Add(1)
			if s.onError != nil {
				s.onError(err)
			}
		}
		if refused != nil {
			t.release(context.WithoutCancel(ctx), now, Ignored)
			return s.refuse(refused)
		}
		t.lease = lease
	}
	s.admitted[p].Add(1)
	s.inflight.Add(1)
	return t, nil
}

func (s *Shedder) refuse(r *Refusal) (Ticket, *Refusal) {
	s.shed[r.Layer][r.Priority].Add(1)
	return Ticket{}, r
}

// Done ends an admitted request with its outcome: Succeeded for a response
// the server produced (its latency is a sample), Dropped for one it failed
// (a 5xx: a signal to lower the adaptive limit, not a latency), Ignored for
// a request refused before it ran (a 429) or abandoned by its client;
// OutcomeOf classifies. ctx bounds the release of fleet capacity (inflight
// mode). Done on a zero Ticket does nothing.
func (t Ticket) Done(ctx context.Context, o Outcome) {
	if t.s == nil {
		return
	}
	t.s.inflight.Add(-1)
	if int(o) < NumOutcomes {
		t.s.finished[o].Add(1)
	}
	var now time.Time
	if t.tok.ok {
		now = t.s.now()
	}
	t.release(ctx, now, o)
}

func (t Ticket) release(ctx context.Context, now time.Time, o Outcome) {
	if t.worker {
		t.s.worker.Done()
	}
	if t.tok.ok {
		t.s.adaptive.Done(t.tok, now, o)
	}
	if t.lease.n > 0 {
		if err := t.lease.Release(ctx); err != nil {
			t.s.fleetErrs.Add(1)
			if t.s.onError != nil {
				t.s.onError(err)
			}
		}
	}
}

// Stats is a snapshot of a Shedder, for metrics.
type Stats struct {
	// Admitted counts admitted requests by class.
	Admitted [NumPriorities]uint64
	// Shed counts shed requests by layer and class.
	Shed [NumLayers][NumPriorities]uint64
	// Finished counts admitted requests done, by outcome.
	Finished [NumOutcomes]uint64
	// InFlight is the number of admitted requests not yet done.
	InFlight int64
	// Worker is the worker layer's state; nil when it is off.
	Worker *WorkerStats
	// Adaptive is the adaptive limiter's state; nil when it is off.
	Adaptive *AdaptiveStats
	// Fleet is the fleet layer's configuration; nil when it is off.
	Fleet *FleetConfig
	// FleetErrors counts store failures of the fleet layer.
	FleetErrors uint64
}

// Stats returns a snapshot.
func (s *Shedder) Stats() Stats {
	var st Stats
	for p := range st.Admitted {
		st.Admitted[p] = s.admitted[p].Load()
	}
	for l := range st.Shed {
		for p := range st.Shed[l] {
			st.Shed[l][p] = s.shed[l][p].Load()
		}
	}
	for o := range st.Finished {
		st.Finished[o] = s.finished[o].Load()
	}
	st.InFlight = s.inflight.Load()
	if s.worker != nil {
		ws := s.worker.Stats(s.now())
		st.Worker = &ws
	}
	if s.adaptive != nil {
		as := s.adaptive.Stats()
		st.Adaptive = &as
	}
	if s.fleet != nil {
		fc := s.fleet.Config()
		st.Fleet = &fc
	}
	st.FleetErrors = s.fleetErrs.Load()
	return st
}
