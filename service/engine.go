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

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
)

// ErrInvalidRequest marks a request the engine refuses to decide: an empty
// domain, no descriptors, a descriptor without entries, an entry with an
// empty key, an unknown override unit, or a hit count above sluice.MaxExact.
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
// One Check makes at most one call to the store for all of a request's
// descriptors (two in one rare case: when only shadow-mode limits denied,
// the batch is taken again without them so the enforced limits are charged;
// see Check). Store failures are never returned: each limit's failure mode
// decides. The engine has no timeout or circuit breaker of its own: a store
// bounds the time of each call it sends and keeps a breaker per node
// (store/redis), and time spent waiting for a busy store or CPU is
// backpressure, bounded only by the caller's context, never a failure.
type Engine struct {
	cfg    Config
	src    RuleSource
	store  sluice.Store
	m      *Metrics
	logger *slog.Logger

	mu    sync.Mutex // serializes cache rebuilds
	cache atomic.Pointer[compiled]

	lastLog    atomic.Int64 // unix nanoseconds of the last store-failure log
	suppressed atomic.Int64 // store failures not logged since

	detailed detailedLabels // detailed_metric label values in use (detailed.go)
}

// compiled is what the engine derives once per snapshot.
type compiled struct {
	snap  *rules.Snapshot
	rules map[*rules.Rule]*ruleInfo
}

// ruleInfo is the per-rule data the hot path needs ready-made.
type ruleInfo struct {
	middle   string       // key part after the hash tag
	local    sluice.Limit // limit for the local fallback
	mode     rules.FailureMode
	current  CurrentLimit
	outcomes [numOutcomes]prometheus.Counter
	near     prometheus.Counter
}

// New returns an Engine deciding with the rules of src and the state in
// store. m may be nil (metrics are kept but not registered anywhere); logger
// may be nil (no logging). cfg must be valid (Config.Validate).
func New(cfg Config, src RuleSource, store sluice.Store, m *Metrics, logger *slog.Logger) (*Engine, error) {
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
		m = NewMetrics(nil)
	}
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	e := &Engine{cfg: cfg, src: src, store: store, m: m, logger: logger}
	e.rulesFor(src.Current()) // metric series of every rule exist from the start
	return e, nil
}

// Health returns the health of each store node, or nil when the store does
// not report it (sluice.HealthReporter).
func (e *Engine) Health() []sluice.NodeHealth {
	if hr, ok := e.store.(sluice.HealthReporter); ok {
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
	ops := []sluice.Op{{Key: "{sluice}|ready", Limit: sluice.PerSecond(sluice.FixedWindow, 1)}}
	res := make([]sluice.Result, 1)
	if err := e.store.Take(ctx, ops, res); err != nil {
		return fmt.Errorf("service: store not answering: %w", err)
	}
	return nil
}

// rulesFor returns the per-rule data of snapshot s, building it on the first
// check after a reload.
func (e *Engine) rulesFor(s *rules.Snapshot) *compiled {
	if c := e.cache.Load(); c != nil && c.snap == s {
		return c
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	old := e.cache.Load()
	if old != nil && old.snap == s {
		return old
	}
	c := &compiled{snap: s, rules: map[*rules.Rule]*ruleInfo{}}
	live := map[[2]string]bool{}
	for _, r := range s.Rules() {
		info := &ruleInfo{mode: r.FailureMode}
		if info.mode == rules.FailureDefault {
			info.mode = e.cfg.DefaultFailureMode
		}
		if !r.Unlimited {
			info.middle = ruleMiddle(r)
			info.local = scaleLimit(r.Limit, e.cfg.ExpectedReplicas)
		}
		info.current = CurrentLimit{Name: r.Name, RequestsPerUnit: r.RequestsPerUnit, Unit: r.Unit, Window: r.Limit.Window}
		for o := range info.outcomes {
			info.outcomes[o] = e.m.decisions.WithLabelValues(r.Domain, r.ID, outcomeNames[o])
		}
		info.near = e.m.nearLimit.WithLabelValues(r.Domain, r.ID)
		c.rules[r] = info
		live[[2]string{r.Domain, r.ID}] = true
	}
	if old != nil { // drop the series of rules that are gone
		for r := range old.rules {
			if !live[[2]string{r.Domain, r.ID}] {
				for _, o := range outcomeNames {
					e.m.decisions.DeleteLabelValues(r.Domain, r.ID, o)
				}
				e.m.nearLimit.DeleteLabelValues(r.Domain, r.ID)
			}
		}
	}
	e.cache.Store(c)
	return c
}

// scaleLimit divides a limit's quota and burst by the replica count, rounding
// up and keeping at least 1 of a non-zero figure. If the result would not be
// a valid limit, the limit is kept as it is.
func scaleLimit(l sluice.Limit, replicas int) sluice.Limit {
	if replicas <= 1 {
		return l
	}
	div := func(x int64) int64 {
		if x == 0 {
			return 0
		}
		return max(1, (x+int64(replicas)-1)/int64(replicas))
	}
	s := l
	s.Quota, s.Burst = div(l.Quota), div(l.Burst)
	if s.Validate() != nil {
		return l
	}
	return s
}

// plan is one descriptor's part of a check.
type plan struct {
	desc    int         // index into the request's descriptors
	info    *ruleInfo   // nil for an override
	rule    *rules.Rule // nil for an override
	mode    rules.FailureMode
	shadow  bool
	local   sluice.Limit
	op      int  // index into ops, -1 when the rule is unlimited
	ks, ke  int  // the op's key is scratch.key[ks:ke]
	dropped bool // replaced by another matched rule
	// shadowHit: a shadow-mode limit denied in an earlier pass and was
	// retried as a look; shadowRes is the denial it reported.
	shadowHit bool
	shadowRes sluice.Result
	// calExcess: a calendar quota's store window outlasts its period by
	// this much (see rules.Calendar.Limit).
	calExcess time.Duration
}

// scratch holds a check's working memory, reused through a pool.
type scratch struct {
	plans   []plan
	ops     []sluice.Op
	results []sluice.Result
	local   []sluice.Op
	lres    []sluice.Result
	key     []byte
	obs     []byte // an Observer's key
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

func (s *scratch) release() {
	clear(s.ops) // drop references to keys
	clear(s.local)
	for i := range s.plans {
		s.plans[i] = plan{}
	}
	s.plans, s.ops, s.results, s.local, s.lres, s.key, s.obs =
		s.plans[:0], s.ops[:0], s.results[:0], s.local[:0], s.lres[:0], s.key[:0], s.obs[:0]
	scratchPool.Put(s)
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
// An admitted concurrency limit holds a lease (Status.Lease) until Release
// gives it back or the limit's window passes.
//
// When only shadow-mode limits deny, the batch is taken a second time with
// those limits as looks, so the enforced limits are charged: shadow mode
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
	if err := validate(&req, e.cfg.Limits); err != nil {
		return Response{}, err
	}
	snap := e.src.Current()
	c := e.rulesFor(snap)
	n := len(req.Descriptors)
	resp := Response{OverallCode: CodeOK}
	var currents []CurrentLimit // allocated once, when the first limit matches
	if n == 1 {
		// The common case in one allocation.
		one := new(struct {
			st [1]Status
			cl [1]CurrentLimit
		})
		resp.Statuses, currents = one.st[:], one.cl[:]
	} else {
		resp.Statuses = make([]Status, n)
	}

	sc := scratchPool.Get().(*scratch)
	defer sc.release()

	knownDomain := snap.HasDomain(req.Domain)
	replacing, calendar := false, false
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		st := &resp.Statuses[i]
		st.Code = CodeOK
		if !knownDomain {
			continue
		}
		cost := req.Hits
		if cost == 0 {
			cost = 1
		}
		if d.Hits != nil {
			cost = *d.Hits
		}
		if d.Limit != nil {
			window, _ := rules.UnitWindow(d.Limit.Unit) // validated
			lim := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: int64(d.Limit.RequestsPerUnit), Window: window}
			if currents == nil {
				currents = make([]CurrentLimit, n)
			}
			currents[i] = CurrentLimit{RequestsPerUnit: d.Limit.RequestsPerUnit, Unit: strings.ToLower(d.Limit.Unit), Window: window}
			st.CurrentLimit = &currents[i]
			ks := len(sc.key)
			sc.key = appendKey(sc.key, req.Domain, d.Entries, nil, string(overrideMiddle(lim)))
			sc.plans = append(sc.plans, plan{desc: i, mode: e.cfg.DefaultFailureMode, local: scaleLimit(lim, e.cfg.ExpectedReplicas),
				op: len(sc.ops), ks: ks, ke: len(sc.key)})
			sc.ops = append(sc.ops, sluice.Op{Limit: lim, Cost: int64(cost)})
			continue
		}
		r := snap.Match(req.Domain, d.Entries)
		if r == nil {
			continue
		}
		ov := e.overrideFor(r, d.Entries)
		if ov.off {
			continue // switched off: as if no rule matched
		}
		info := c.rules[r]
		st.Rule = r
		if len(r.Replaces) > 0 {
			replacing = true
		}
		if r.Unlimited {
			st.Unlimited = true
			sc.plans = append(sc.plans, plan{desc: i, info: info, rule: r, op: -1})
			continue
		}
		if currents == nil {
			currents = make([]CurrentLimit, n)
		}
		currents[i] = info.current
		st.CurrentLimit = &currents[i]
		ks := len(sc.key)
		lim, excess := e.limitFor(r, &ov, &currents[i])
		local, own := info.local, (*sluice.Limit)(nil)
		if lim != r.Limit {
			local, own = scaleLimit(lim, e.cfg.ExpectedReplicas), &lim
		}
		sc.key = appendRuleKey(sc.key, req.Domain, d.Entries, r, info.middle, subCounter(r), own)
		calendar = calendar || excess != 0
		sc.plans = append(sc.plans, plan{desc: i, info: info, rule: r, mode: info.mode, shadow: r.ShadowMode || ov.shadow, local: local,
			op: len(sc.ops), ks: ks, ke: len(sc.key), calExcess: excess})
		sc.ops = append(sc.ops, sluice.Op{Limit: splitLimit(lim, r.SubCounters), Cost: int64(cost)})
	}
	if replacing {
		e.applyReplaces(sc, &resp)
	}
	if len(sc.ops) > 0 {
		// One allocation for every key of the request.
		keys := string(sc.key)
		for i := range sc.plans {
			if p := &sc.plans[i]; p.op >= 0 {
				sc.ops[p.op].Key = keys[p.ks:p.ke]
			}
		}
		if err := e.decide(ctx, sc, &resp); err != nil {
			return Response{}, err
		}
		if calendar {
			trimCalendar(sc, &resp)
		}
	}
	e.record(sc, &req, &resp)
	if e.cfg.Observer != nil {
		e.observe(start, sc, &req, &resp)
	}
	e.m.duration.Observe(time.Since(start).Seconds())
	return resp, nil
}

// applyReplaces drops the limits whose names other matched rules replace.
func (e *Engine) applyReplaces(sc *scratch, resp *Response) {
	kept := sc.ops[:0]
	for i := range sc.plans {
		p := &sc.plans[i]
		if p.rule != nil && p.rule.Name != "" && replaced(p.rule, sc.plans) {
			p.dropped = true
			resp.Statuses[p.desc] = Status{Code: CodeOK}
			continue
		}
		if p.op >= 0 {
			p.op, kept = len(kept), append(kept, sc.ops[p.op])
		}
	}
	for i := range sc.plans {
		if p := &sc.plans[i]; p.dropped {
			p.op = -1
		}
	}
	sc.ops = kept
}

// replaced reports whether a matched rule other than r itself names r in its
// replaces.
func replaced(r *rules.Rule, plans []plan) bool {
	for i := range plans {
		o := plans[i].rule
		if o == nil || o == r {
			continue
		}
		for _, n := range o.Replaces {
			if n == r.Name {
				return true
			}
		}
	}
	return false
}

// decide takes the ops from the store, or applies the failure policy, and
// fills the statuses of the planned descriptors. It returns an error only
// when ctx ended before the store answered.
func (e *Engine) decide(ctx context.Context, sc *scratch, resp *Response) error {
	sc.results = growResults(sc.results, len(sc.ops))
	err := e.take(ctx, sc.ops, sc.results)
	for pass := 0; err == nil && pass < 2; pass++ {
		// Only shadow limits denied? Then take again with them as looks.
		enforcedDenied, shadowDenied := false, false
		for i := range sc.plans {
			p := &sc.plans[i]
			if p.op < 0 || p.dropped || sc.results[p.op].Allowed {
				continue
			}
			if p.shadow {
				shadowDenied = true
			} else {
				enforcedDenied = true
			}
		}
		if enforcedDenied || !shadowDenied {
			break
		}
		for i := range sc.plans {
			p := &sc.plans[i]
			if p.op >= 0 && !p.dropped && p.shadow && !sc.results[p.op].Allowed {
				p.shadowHit, p.shadowRes = true, sc.results[p.op]
				sc.ops[p.op].Cost = 0
			}
		}
		err = e.take(ctx, sc.ops, sc.results)
	}
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			e.m.abandoned.Inc()
			return fmt.Errorf("service: caller gave up before the store answered: %w", cerr)
		}
		e.fail(ctx, sc, resp, err)
		return nil
	}
	charged := allAllowed(sc.results)
	for i := range sc.plans {
		p := &sc.plans[i]
		if p.op < 0 || p.dropped {
			continue
		}
		r := sc.results[p.op]
		if p.shadowHit {
			r = p.shadowRes
		}
		st := &resp.Statuses[p.desc]
		st.Result = r
		if !r.Allowed {
			st.Code = CodeOverLimit
		}
		holdLease(st, charged && !p.shadowHit, &sc.ops[p.op])
	}
	return nil
}

// allAllowed reports whether a batch was charged: a store charges a batch
// only when it admits every op.
func allAllowed(results []sluice.Result) bool {
	for i := range results {
		if !results[i].Allowed {
			return false
		}
	}
	return true
}

// holdLease records in st the lease its result names, with what Release
// needs to give it back, if the batch was charged; otherwise it clears any
// lease the result names (an uncharged acquire holds nothing).
func holdLease(st *Status, charged bool, op *sluice.Op) {
	if !charged || st.Result.Lease == 0 || st.Rule == nil || op.Limit.Algorithm != sluice.Concurrency || op.Cost == 0 {
		st.Result.Lease = 0
		return
	}
	st.Lease, st.key = st.Result.Lease, op.Key
}

// Release gives back the concurrency leases that the statuses of resp hold
// (Status.Lease), in one call to the store (and one to the local fallback
// store for leases it granted). Call it once the work a Check admitted is
// done. A Response without leases costs nothing. Releasing a lease twice, or
// one that has expired, is harmless.
//
// Release returns an error when a store could not release; the leases are
// then freed when their limit's window passes. A store that keeps a circuit
// breaker fails it fast while the node is known to be down.
func (e *Engine) Release(ctx context.Context, resp Response) error {
	var ops, local []sluice.Op
	for i := range resp.Statuses {
		st := &resp.Statuses[i]
		if st.Lease == 0 || st.key == "" || st.Rule == nil {
			continue
		}
		// The limit the check used: the rule's, or for a lease the local
		// fallback granted, the rule's scaled as fail does.
		op := sluice.Op{Key: st.key, Limit: st.Rule.Limit, Release: true, Lease: st.Lease}
		if st.Degraded == "local" {
			op.Limit = scaleLimit(op.Limit, e.cfg.ExpectedReplicas)
			local = append(local, op)
		} else {
			ops = append(ops, op)
		}
	}
	return e.release(ctx, ops, local)
}

// ReleaseLeases is Release for a caller that kept the request and the leases
// instead of the Response, such as a client of the HTTP API: leases[i] is the
// lease (Status.Lease) the check of req gave req.Descriptors[i], zero for
// none. The store keys are rebuilt from req under the rules in force now; a
// lease whose descriptor no longer matches a concurrency rule (a reload
// changed it) is left to expire. For a rule with failure mode local, the
// lease is also released in the local fallback store, where it may have been
// granted (releasing a lease a store does not hold does nothing).
//
// ReleaseLeases returns an error wrapping ErrInvalidRequest when req is
// invalid or len(leases) differs from len(req.Descriptors), and an error
// when a store could not release.
func (e *Engine) ReleaseLeases(ctx context.Context, req Request, leases []uint64) error {
	if err := validate(&req, e.cfg.Limits); err != nil {
		return err
	}
	if len(leases) != len(req.Descriptors) {
		return fmt.Errorf("service: %w: %d leases for %d descriptors", ErrInvalidRequest, len(leases), len(req.Descriptors))
	}
	snap := e.src.Current()
	c := e.rulesFor(snap)
	var ops, local []sluice.Op
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		if leases[i] == 0 || d.Limit != nil { // an override is never a concurrency limit
			continue
		}
		r := snap.Match(req.Domain, d.Entries)
		if r == nil || r.Unlimited || r.Limit.Algorithm != sluice.Concurrency {
			continue
		}
		info := c.rules[r]
		key := string(appendRuleKey(nil, req.Domain, d.Entries, r, info.middle, 0, nil))
		ops = append(ops, sluice.Op{Key: key, Limit: r.Limit, Release: true, Lease: leases[i]})
		if info.mode == rules.FailureLocal {
			local = append(local, sluice.Op{Key: key, Limit: info.local, Release: true, Lease: leases[i]})
		}
	}
	return e.release(ctx, ops, local)
}

// release gives back leases: ops in the store, local in the fallback store.
func (e *Engine) release(ctx context.Context, ops, local []sluice.Op) error {
	var errs []error
	if len(ops) > 0 {
		if err := e.take(ctx, ops, make([]sluice.Result, len(ops))); err != nil {
			errs = append(errs, fmt.Errorf("service: release: %w", err))
		}
	}
	if len(local) > 0 && e.cfg.Fallback != nil {
		if err := e.cfg.Fallback.Take(ctx, local, make([]sluice.Result, len(local))); err != nil {
			errs = append(errs, fmt.Errorf("service: release from the local fallback: %w", err))
		}
	}
	return errors.Join(errs...)
}

func growResults(r []sluice.Result, n int) []sluice.Result {
	if cap(r) < n {
		return make([]sluice.Result, n)
	}
	r = r[:n]
	clear(r)
	return r
}

// take calls the store.
func (e *Engine) take(ctx context.Context, ops []sluice.Op, results []sluice.Result) error {
	return e.store.Take(ctx, ops, results)
}

// fail applies each limit's failure mode after the store failed with err.
func (e *Engine) fail(ctx context.Context, sc *scratch, resp *Response, err error) {
	reason := "error"
	switch {
	case errors.Is(err, sluice.ErrStoreUnavailable):
		reason = "breaker_open"
	case errors.Is(err, sluice.ErrStoreTimeout):
		reason = "timeout"
	}
	e.m.storeErrors.WithLabelValues(reason).Inc()
	e.logFailure(reason, err)

	// Closed limits deny first; if one does, the request is denied, so the
	// local fallback only looks and charges nothing.
	closedDenies := false
	for i := range sc.plans {
		p := &sc.plans[i]
		p.shadowHit = false
		if p.op < 0 || p.dropped {
			continue
		}
		st := &resp.Statuses[p.desc]
		st.Result = sluice.Result{}
		mode := p.mode
		if mode == rules.FailureLocal && e.cfg.Fallback == nil {
			mode = rules.FailureOpen
		}
		switch mode {
		case rules.FailureClosed:
			st.Degraded = OutcomeFailedClosed
			st.Code = CodeOverLimit
			if !p.shadow {
				closedDenies = true
			}
		case rules.FailureLocal:
			st.Degraded = "local"
			sc.local = append(sc.local, sluice.Op{Key: sc.ops[p.op].Key, Limit: p.local, Cost: sc.ops[p.op].Cost})
		default:
			st.Degraded = OutcomeFailedOpen
			st.Code = CodeOK
		}
	}
	if len(sc.local) == 0 {
		return
	}
	if closedDenies {
		for i := range sc.local {
			sc.local[i].Cost = 0
		}
	}
	sc.lres = growResults(sc.lres, len(sc.local))
	lerr := e.cfg.Fallback.Take(ctx, sc.local, sc.lres)
	localCharged := lerr == nil && allAllowed(sc.lres)
	j := 0
	for i := range sc.plans {
		p := &sc.plans[i]
		st := &resp.Statuses[p.desc]
		if p.op < 0 || p.dropped || st.Degraded != "local" {
			continue
		}
		if lerr != nil {
			// The in-process store cannot normally fail; if it does, allow.
			st.Degraded, st.Code = OutcomeFailedOpen, CodeOK
		} else {
			st.Result = sc.lres[j]
			if !st.Result.Allowed {
				st.Code = CodeOverLimit
			}
			holdLease(st, localCharged, &sc.local[j])
		}
		j++
	}
	if lerr != nil {
		e.logger.Error("local fallback store failed; allowing", "err", lerr)
	}
}

// logFailure logs store failures, at most one line a second.
func (e *Engine) logFailure(reason string, err error) {
	now := time.Now().UnixNano()
	last := e.lastLog.Load()
	if now-last < int64(time.Second) || !e.lastLog.CompareAndSwap(last, now) {
		e.suppressed.Add(1)
		return
	}
	e.logger.Warn("store failed; applying failure policy", "reason", reason, "err", err,
		"suppressed", e.suppressed.Swap(0))
}

// record applies shadow mode to the statuses, sets the overall code, and
// counts the decisions.
func (e *Engine) record(sc *scratch, req *Request, resp *Response) {
	for i := range sc.plans {
		p := &sc.plans[i]
		if p.dropped {
			continue
		}
		st := &resp.Statuses[p.desc]
		var out int
		switch {
		case p.op < 0: // unlimited
			out = outAllowed
		case st.Code == CodeOverLimit && p.shadow:
			st.Code, st.Shadowed = CodeOK, true
			out = outShadowDenied
		case st.Degraded == OutcomeFailedOpen:
			out = outFailedOpen
		case st.Degraded == OutcomeFailedClosed:
			out = outFailedClosed
		case st.Degraded == "local" && st.Code == CodeOverLimit:
			out = outLocalDenied
		case st.Degraded == "local":
			out = outLocalAllowed
		case st.Code == CodeOverLimit:
			out = outDenied
		default:
			out = outAllowed
		}
		if p.shadowHit {
			st.Code, st.Shadowed = CodeOK, true
			out = outShadowDenied
		}
		if st.Code == CodeOverLimit {
			resp.OverallCode = CodeOverLimit
		}
		near := out == outAllowed && p.op >= 0 && st.Result.Limit > 0 &&
			float64(st.Result.Limit-st.Result.Remaining) > e.cfg.NearLimitRatio*float64(st.Result.Limit)
		switch {
		case p.info == nil: // override: never per-value labels
			e.m.decisions.WithLabelValues(req.Domain, "override", outcomeNames[out]).Inc()
			if near {
				e.m.nearLimit.WithLabelValues(req.Domain, "override").Inc()
			}
		case p.rule.DetailedMetric:
			label := e.detailed.label(e.cfg.Limits, req.Domain, p.rule.ID, req.Descriptors[p.desc].Entries)
			e.m.decisions.WithLabelValues(req.Domain, label, outcomeNames[out]).Inc()
			if near {
				e.m.nearLimit.WithLabelValues(req.Domain, label).Inc()
			}
		default:
			p.info.outcomes[out].Inc()
			if near {
				p.info.near.Inc()
			}
		}
	}
}

// observe tells the Observer each rule-file limit's decision.
func (e *Engine) observe(now time.Time, sc *scratch, req *Request, resp *Response) {
	for i := range sc.plans {
		p := &sc.plans[i]
		if p.dropped || p.op < 0 || p.rule == nil {
			continue
		}
		st := &resp.Statuses[p.desc]
		denied := st.Shadowed || (st.Code == CodeOverLimit && st.Degraded != OutcomeFailedClosed)
		sc.obs = appendEntries(sc.obs[:0], req.Descriptors[p.desc].Entries)
		e.cfg.Observer.Observe(now, req.Domain, p.rule.ID, sc.obs, denied)
	}
}

// appendEntries appends entries as "k1=v1.k2=v2".
func appendEntries(b []byte, entries []rules.Entry) []byte {
	for i, en := range entries {
		if i > 0 {
			b = append(b, '.')
		}
		b = append(b, en.Key...)
		b = append(b, '=')
		b = append(b, en.Value...)
	}
	return b
}

// detailedLabel is the rule label of a detailed_metric rule: the request's
// entries as key=value joined with ".".
func detailedLabel(entries []rules.Entry) string {
	return string(appendEntries(nil, entries))
}

// validate checks a request's shape and size (lim, see limits.go).
func validate(req *Request, lim Limits) error {
	if req.Domain == "" {
		return fmt.Errorf("service: %w: empty domain", ErrInvalidRequest)
	}
	if len(req.Descriptors) == 0 {
		return fmt.Errorf("service: %w: no descriptors", ErrInvalidRequest)
	}
	if err := lim.Check(req); err != nil {
		return fmt.Errorf("service: %w: %w", ErrInvalidRequest, err)
	}
	if req.Hits > sluice.MaxExact {
		return fmt.Errorf("service: %w: hits %d above %d", ErrInvalidRequest, req.Hits, uint64(sluice.MaxExact))
	}
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		if len(d.Entries) == 0 {
			return fmt.Errorf("service: %w: descriptor %d has no entries", ErrInvalidRequest, i)
		}
		for j := range d.Entries {
			if d.Entries[j].Key == "" {
				return fmt.Errorf("service: %w: descriptor %d: entry %d has an empty key", ErrInvalidRequest, i, j)
			}
		}
		if d.Hits != nil && *d.Hits > sluice.MaxExact {
			return fmt.Errorf("service: %w: descriptor %d: hits %d above %d", ErrInvalidRequest, i, *d.Hits, uint64(sluice.MaxExact))
		}
		if d.Limit != nil {
			if _, ok := rules.UnitWindow(d.Limit.Unit); !ok {
				return fmt.Errorf("service: %w: descriptor %d: limit unit %q (want second, minute, hour, day, week, month or year)", ErrInvalidRequest, i, d.Limit.Unit)
			}
		}
	}
	return nil
}
