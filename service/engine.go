package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/algorithm"
	"github.com/sluice-rl/sluice/batch"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/store/stack"
)

// ErrInvalidRequest marks a request the engine refuses to decide: an empty
// domain, no descriptors, an unknown override unit, or a hit count above
// algorithm.MaxExact. (A descriptor without entries, or with an entry whose key
// is empty, matches no rule and is answered OK, as envoyproxy/ratelimit
// answers it; the request's other descriptors are decided as usual.)
// Servers map it to InvalidArgument (gRPC) or 400 (HTTP); test with
// errors.Is.
var ErrInvalidRequest = errors.New("invalid request")

// RuleSource supplies the rules in force. *watch.Watcher satisfies it.
// Current must be safe for concurrent use and should not return nil (nil is
// treated as a snapshot without rules).
type RuleSource interface {
	Current() *rules.Snapshot
}

// StaticRules is a RuleSource that always returns the same snapshot.
type StaticRules struct{ Snapshot *rules.Snapshot }

// Current returns s.Snapshot.
func (s StaticRules) Current() *rules.Snapshot { return s.Snapshot }

// Engine decides check requests. Create it with New; it is safe for
// concurrent use.
//
// One Check makes exactly one call to the store for all of a request's
// descriptors: batch.Decider's Decide, which carries the role of each op
// (shadow and quota-mode limits, charges and refunds that stand when the
// request is denied, settle-after probes, penalties). A store that is not
// a batch.Decider is decided by batch.Run over its Take, which may call it
// more than once (see batch.Run); store/memory and store/compose are
// Deciders. Store failures are never returned: each limit's failure mode
// decides. The engine has no timeout or circuit breaker of its own: a store
// bounds the time of each call it sends and keeps a breaker per node
// (store/redis), and time spent waiting for a busy store or CPU is
// backpressure, bounded only by the caller's context, never a failure.
type Engine struct {
	cfg    Config
	src    RuleSource
	store  sluice.Store
	dec    batch.Decider // store, or batch.Plain over it
	m      Metrics
	logger *slog.Logger

	mu  sync.Mutex             // serializes compiles
	pol atomic.Pointer[policy] // the policy in force (see policy)
	// overlays is Config.Overrides when it is an OverlaySource.
	overlays OverlaySource

	lastLog    atomic.Int64 // unix nanoseconds of the last store-failure log
	suppressed atomic.Int64 // store failures not logged since

	detailed detailedLabels // detailed_metric label values in use (detailed.go)

	lastHits map[[2]string]*atomic.Int64 // guarded by mu; see LastHit
}

// New returns an Engine deciding with the rules of src and the state in
// store. m may be nil (nothing is counted; promstats.New keeps the metrics
// in Prometheus); logger may be nil (no logging). cfg must be valid
// (Config.Validate).
func New(cfg Config, src RuleSource, store sluice.Store, m Metrics, logger *slog.Logger) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if src == nil {
		return nil, errors.New("service: New: nil rule source")
	}
	if store == nil {
		return nil, errors.New("service: New: nil store")
	}
	if m == nil {
		m = discard{}
	}
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	dec, ok := store.(batch.Decider)
	if !ok {
		dec = batch.Plain{Store: store}
	}
	e := &Engine{cfg: cfg, src: src, store: store, dec: dec, m: m, logger: logger, overlays: overlaySource(cfg.Overrides)}
	e.compile() // metric series of every rule exist from the start
	return e, nil
}

// Health returns the health of each store node, or nil when the store does
// not report it (stack.HealthReporter).
func (e *Engine) Health() []stack.NodeHealth {
	if hr, ok := e.store.(stack.HealthReporter); ok {
		return hr.Health()
	}
	return nil
}

// Ready reports whether the engine can decide with the store: rules are
// loaded, and the store answers a look (cost 0) at a reserved key or, for a
// store that reports the health of its nodes, at least one node is not
// open. Use it for readiness probes: an instance whose store is partly down
// still decides the keys of its healthy nodes, so it stays ready; the error
// of a store that is wholly down names every node that is out.
func (e *Engine) Ready(ctx context.Context) error {
	if e.src.Current() == nil {
		return errors.New("service: no rules loaded")
	}
	if h := e.Health(); len(h) > 0 {
		var out []string
		for _, n := range h {
			if n.State == "open" {
				out = append(out, n.Node)
			}
		}
		if len(out) == len(h) {
			return fmt.Errorf("service: every store node is out (circuit breaker open): %s", strings.Join(out, ", "))
		}
	}
	ops := []sluice.Op{{Key: "{sluice}|ready", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1, Window: time.Second}}}
	res := make([]sluice.Result, 1)
	if err := e.store.Take(ctx, ops, res); err != nil {
		return fmt.Errorf("service: store not answering: %w", err)
	}
	return nil
}

// Check decides a request.
//
// Every descriptor is matched against the rules of req.Domain (a limit given
// in the descriptor replaces the rules, as in envoy, for domains that have a
// rule file); the limits of all matched descriptors are applied in one store
// call, all-or-nothing, so a denied request charges none of its limits.
// Statuses come back in request order; any OVER_LIMIT status makes the
// overall code OVER_LIMIT. A rule in shadow mode is charged and counted but
// reports OK. A rule whose name another matched rule replaces is left out. An
// unlimited rule is always OK. A descriptor's cost is its own Hits if set
// (zero looks without charging), else req.Hits, else 1.
//
// Descriptors whose rules share a choice group (rules.Rule.Choice) are
// alternatives: they are tried one at a time, in request order, each with
// every other descriptor of the request in one store call, and the first
// admitted is charged and named in Response.Choice (see choice.go: at most
// one store call per alternative; a request with alternatives of two
// groups is invalid).
//
// An admitted concurrency limit holds a lease (Status.Lease) until Release
// gives it back or the limit's window passes.
//
// Envoy's additions: a descriptor with Refund gives its hits back
// (sluice.Refund); on a rule with settle: after, hits are charged whether
// or not they fit (sluice.Charge) and a look (zero hits) is denied, with
// the exact wait for one unit, while not one unit is left. Charges and
// refunds are never denied and are applied even when another limit denies
// the request (batch.Settle). A quota-mode limit
// (rules.Rule.QuotaMode, Config.QuotaMode) that is over reports
// OVER_LIMIT, but the request is denied for it only when every quota-mode
// limit of the request is over; otherwise it is retried as a look, as
// shadow-mode limits are, so the admitted request is charged elsewhere. A
// descriptor with no entries or an empty key matches no rule and is OK.
//
// When only shadow-mode limits deny, the store decides those limits as
// looks (batch.Shadow), so the enforced limits are charged: shadow mode
// must not change what is admitted.
//
// When the store fails, each limit's failure mode decides: open allows,
// closed denies, local asks the in-process fallback store at the limit
// divided by ExpectedReplicas. A store that is merely slow is waited for:
// if ctx ends first, Check returns an error wrapping ctx.Err() (the caller
// gave up; that says nothing about the store, so no failure mode applies
// and nothing is counted as a store error). Otherwise Check returns an
// error only for an invalid request, wrapping ErrInvalidRequest.
func (e *Engine) Check(ctx context.Context, req Request) (Response, error) {
	start := time.Now()
	sc := scratchPool.Get().(*scratch)
	defer sc.release()
	if err := validate(&req, e.cfg.RequestBounds, sc); err != nil {
		return Response{}, err
	}
	pol := e.policy() // the one state this check decides by
	if resp, ok := pol.denied(&req); ok {
		e.m.CheckDuration(time.Since(start))
		return resp, nil
	}
	resp := e.plan(pol, sc, &req, nil)
	if sc.err != nil {
		return Response{}, sc.err
	}
	if e.cfg.Now != nil {
		touch(sc, e.cfg.Now())
	} else {
		touch(sc, start)
	}
	var group string
	var alts []int
	var err error
	if pol.choices {
		group, alts, err = alternatives(sc)
	}
	switch {
	case err != nil:
		return Response{}, err
	case alts != nil:
		if resp, err = e.choose(ctx, pol, sc, &req, &resp, group, alts); err != nil {
			return Response{}, err
		}
	case len(sc.ops) > 0:
		if err := e.decide(ctx, sc, &resp); err != nil {
			return Response{}, err
		}
		if sc.calendar {
			trimCalendar(sc, &resp)
		}
	}
	e.record(sc, &req, &resp)
	if e.cfg.Notify != nil && pol.notifies {
		e.notify(sc, &req, &resp, start)
	}
	if e.cfg.Sample != nil {
		e.cfg.Sample.record(&req, &resp)
	}
	if e.cfg.Observer != nil {
		e.observe(start, sc, &req, &resp)
	}
	e.m.CheckDuration(time.Since(start))
	return resp, nil
}

// validate checks a request's shape and size (lim, see limits.go), and
// puts the unit of each limit given in the request in sc.units (sc may be
// nil when the caller plans nothing).
func validate(req *Request, lim RequestBounds, sc *scratch) error {
	if req.Domain == "" {
		return fmt.Errorf("service: %w: empty domain", ErrInvalidRequest)
	}
	if len(req.Descriptors) == 0 {
		return fmt.Errorf("service: %w: no descriptors", ErrInvalidRequest)
	}
	if err := lim.Check(req); err != nil {
		return fmt.Errorf("service: %w: %w", ErrInvalidRequest, err)
	}
	if req.Hits > algorithm.MaxExact {
		return fmt.Errorf("service: %w: hits %d above %d", ErrInvalidRequest, req.Hits, uint64(algorithm.MaxExact))
	}
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		if d.Hits != nil && *d.Hits > algorithm.MaxExact {
			return fmt.Errorf("service: %w: descriptor %d: hits %d above %d", ErrInvalidRequest, i, *d.Hits, uint64(algorithm.MaxExact))
		}
		if d.Limit != nil {
			u, ok := requestUnit(d.Limit.Unit)
			if !ok {
				return fmt.Errorf("service: %w: descriptor %d: limit unit %q (want second, minute, hour, day, week, month or year)", ErrInvalidRequest, i, d.Limit.Unit)
			}
			if sc != nil {
				if len(sc.units) < len(req.Descriptors) {
					sc.units = append(sc.units[:0], make([]rules.Unit, len(req.Descriptors))...)
				}
				sc.units[i] = u
			}
		}
	}
	return nil
}

// units is envoy's table of units (rules.Units), read once.
var units = rules.Units()

// requestUnit returns the unit a limit given in a request names
// (case-insensitive, as rules.UnitWindow reads it): validate looks it up
// once per descriptor, and plan uses what it found.
func requestUnit(name string) (rules.Unit, bool) {
	for _, u := range units {
		if u.Name == name {
			return u, true
		}
	}
	for _, u := range units {
		if strings.EqualFold(u.Name, name) {
			return u, true
		}
	}
	return rules.Unit{}, false
}
