// Package httplimit puts Sluice in front of HTTP handlers.
//
// Limit is the simple case: one sluice.Limiter and a key function (IPKey,
// HeaderKey, your own), no rule file and no engine.
//
// New is the engine's middleware, and NewGateway a reverse-proxy gateway, that ask the
// decision engine about every request, answer 429 with Retry-After and a
// problem+json body when a limit refuses it, 503 when shedding load, and send
// the RateLimit and RateLimit-Policy fields on every response.
//
// The engine may be in process (*service.Engine) or a remote Sluice
// (package httplimit/remote, over Envoy's gRPC rate limit protocol); both are
// Checkers. Concurrency limits hold a lease from before the handler runs
// until it returns — also when it panics or the client goes away. Rule-file
// limits with algorithm concurrency work through a Checker that is also a
// Releaser (*service.Engine is; the remote Checker is not, because Envoy's
// protocol cannot release). Config.Concurrency applies such limits in the
// middleware itself, through sluice.Limiter, with any Checker.
//
// The edge decides all or nothing: Config.Concurrency slots are taken
// first, so a request refused there (429, or 503 with Shed) is never shown
// to the Checker and charges no rate limit; a request the Checker refuses
// gives its slots back. The fields and bodies come from edge.Decision,
// the mapping every Sluice transport uses.
package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/headers"
	"github.com/sluice-rl/sluice/headers/edge"
	"github.com/sluice-rl/sluice/internal/cow"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
)

// Checker decides requests. *service.Engine is one; remote.Checker asks a
// Sluice server over gRPC. Check must not keep req or its slices after it
// returns: the middleware reuses them.
type Checker interface {
	Check(ctx context.Context, req service.Request) (service.Response, error)
}

// Releaser is a Checker that can give back the concurrency leases a Check
// took (service.Status.Lease). *service.Engine is one. The middleware
// releases them when the handler returns, panics, or loses its client; with
// a Checker that is not a Releaser, leases are freed only when their limit's
// window passes.
type Releaser interface {
	Release(ctx context.Context, resp service.Response) error
}

// Charger is a Checker that can settle costs after the fact
// (service.Engine.Charge). *service.Engine is one; the remote Checker is not
// (Envoy's protocol cannot charge). The middleware charges through it the
// cost a request turns out to have (Config.ActualCost, ReportCost), and
// refunds a request it admitted but then refused or lost before the handler
// ran (a leaky_bucket delay over MaxDelay, a client gone while delayed).
type Charger interface {
	Charge(ctx context.Context, req service.ChargeRequest) (service.Response, error)
}

// Concurrency is a limit on requests in flight, held from before the handler
// runs until it returns — also when it panics or the client goes away.
type Concurrency struct {
	// Name is the policy name in the RateLimit fields. Required.
	Name string
	// Limiter applies the limit; its Limit must be sluice.Concurrency (Quota
	// in flight at once, Window the lease timeout that frees the slots of a
	// crashed process).
	Limiter *sluice.Limiter
	// Key picks the counter; nil means one counter for all requests. A
	// request for which Key reports false is not limited by this entry.
	Key KeyFunc
	// Shed answers a refused request with 503 (the server is saturated, not
	// the client's fault) instead of 429.
	Shed bool
}

// Config configures the middleware. Checker and Domain are required.
type Config struct {
	// Checker decides. Required.
	Checker Checker
	// Domain is the rule domain the requests are checked in. Required.
	Domain string
	// Descriptors lists the descriptors of each request; each is a list of
	// KeyFuncs giving its entries in order (for example
	// {{ClientIP("remote_address", tp)}, {Header("api_key", "X-API-Key"),
	// Route("path")}}). A descriptor for which any KeyFunc reports false is
	// left out.
	Descriptors [][]KeyFunc
	// Cost returns what a request costs (Request.Hits); nil means 1, and so
	// does 0. When the real cost is known only after the response, this is
	// the estimate the check charges, and ActualCost or ReportCost settle
	// the difference.
	Cost func(*http.Request) uint64
	// ActualCost, if set, is what a request really cost, computed once the
	// handler has returned from what it wrote (status code, body bytes):
	// the middleware then charges the difference from what the check
	// charged (Cost), or refunds it when the estimate was too high (never
	// below a fresh counter). ok false keeps the estimate. A cost the
	// handler reported with ReportCost takes precedence. It needs a
	// Checker that is a Charger. The settlement is one store call made
	// before the response is finished; its errors go to OnError.
	ActualCost func(r *http.Request, w Written) (cost uint64, ok bool)
	// CostReports lets handlers report the real cost of their request with
	// ReportCost, settled as ActualCost's is. It needs a Checker that is a
	// Charger, and costs a context value per request.
	CostReports bool
	// Concurrency limits requests in flight; see Concurrency. Rule-file
	// limits with algorithm concurrency work too when the Checker is a
	// Releaser (the in-process engine); with a remote Checker their leases
	// are freed only when they expire, so put such limits here instead.
	Concurrency []Concurrency
	// MaxDelay bounds the wait of a request a leaky_bucket limit admitted
	// with a Delay: a longer Delay is answered 503 instead of queued. Zero
	// means DefaultMaxDelay.
	MaxDelay time.Duration
	// FailClosed answers 503 when the Checker fails; by default the request
	// goes through, as Envoy does (the engine itself never fails: its
	// failure modes decide; this is for remote Checkers). A request the
	// Checker refuses as invalid (service.ErrInvalidRequest: a key over the
	// engine's Limits, or not valid UTF-8) is answered 400 either way.
	FailClosed bool
	// Legacy also sends X-RateLimit-Limit, -Remaining, -Reset and -Used for
	// the most restrictive policy.
	Legacy bool
	// OnError, if set, is told about Checker errors and concurrency store
	// errors (for logging; the middleware itself does not log).
	OnError func(r *http.Request, err error)
	// Now is the clock for X-RateLimit-Reset; nil means time.Now.
	Now func() time.Time
}

// DefaultMaxDelay is Config.MaxDelay's default.
const DefaultMaxDelay = 5 * time.Second

// Written is what a handler wrote, for Config.ActualCost.
type Written struct {
	// Status is the response's status code (200 when the handler wrote
	// nothing or did not call WriteHeader, as net/http then answers).
	Status int
	// Bytes counts the body bytes the handler wrote.
	Bytes int64
}

// Handler is the middleware. It is safe for concurrent use.
type Handler struct {
	next     http.Handler
	cfg      Config
	nEntries int
	releaser Releaser // cfg.Checker, when it can release leases
	charger  Charger  // cfg.Checker, when it can charge
	settles  bool     // the real cost is settled after the handler

	byRule   cow.Map[*rules.Rule, string] // rendered RateLimit-Policy members of rules
	policies cow.Map[policyKey, string]   // … of other limits (Config.Concurrency, remote ones)
	bodies   cow.Map[string, []byte]      // 429 bodies by the one violated policy
}

// policyKey identifies a rendered RateLimit-Policy member without a rule.
type policyKey struct {
	name   string
	quota  int64
	window int64
	unit   headers.QuotaUnit
}

// New returns a Handler that checks each request before passing it to next.
func New(next http.Handler, cfg Config) (*Handler, error) {
	var errs []error
	if next == nil {
		errs = append(errs, errors.New("next handler is nil"))
	}
	if cfg.Checker == nil {
		errs = append(errs, errors.New("Config.Checker is nil"))
	}
	if cfg.Domain == "" {
		errs = append(errs, errors.New("Config.Domain is empty"))
	}
	n := 0
	for i, d := range cfg.Descriptors {
		if len(d) == 0 {
			errs = append(errs, fmt.Errorf("Config.Descriptors[%d] has no entries", i))
		}
		for j, f := range d {
			if f == nil {
				errs = append(errs, fmt.Errorf("Config.Descriptors[%d][%d] is nil", i, j))
			}
		}
		n += len(d)
	}
	for i, c := range cfg.Concurrency {
		switch {
		case c.Name == "":
			errs = append(errs, fmt.Errorf("Config.Concurrency[%d].Name is empty", i))
		case c.Limiter == nil:
			errs = append(errs, fmt.Errorf("Config.Concurrency[%d] (%s): Limiter is nil", i, c.Name))
		case c.Limiter.Limit().Algorithm != sluice.Concurrency:
			errs = append(errs, fmt.Errorf("Config.Concurrency[%d] (%s): limit %v is not a concurrency limit", i, c.Name, c.Limiter.Limit()))
		}
	}
	if cfg.MaxDelay < 0 {
		errs = append(errs, fmt.Errorf("Config.MaxDelay %v is negative", cfg.MaxDelay))
	}
	charger, canCharge := cfg.Checker.(Charger)
	if (cfg.ActualCost != nil || cfg.CostReports) && cfg.Checker != nil && !canCharge {
		errs = append(errs, fmt.Errorf("Config.ActualCost and Config.CostReports need a Checker that can charge (a Charger, such as *service.Engine); %T cannot", cfg.Checker))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("httplimit: New: %w", errors.Join(errs...))
	}
	if cfg.MaxDelay == 0 {
		cfg.MaxDelay = DefaultMaxDelay
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	h := &Handler{next: next, cfg: cfg, nEntries: n, charger: charger, settles: cfg.ActualCost != nil || cfg.CostReports}
	h.releaser, _ = cfg.Checker.(Releaser)
	return h, nil
}

// scratch is one request's working memory, pooled.
type scratch struct {
	descs   []service.Descriptor
	entries []rules.Entry
	d       edge.Decision
	slots   []slot
	detail  string // the problem's detail when not the default
	invalid string // why the Checker refused the request as invalid: a 400
	policy  []byte
	buf     []byte
	leases  []func(context.Context) error
	// resp is the Checker's answer and hits what it charged each of its
	// descriptors, when it admitted the request (charged: for
	// settleCharge and refundCheck).
	resp    service.Response
	hits    uint64
	charged bool
	costs   []service.ChargeDescriptor
}

// slot is one Config.Concurrency entry's acquisition.
type slot struct {
	c   *Concurrency
	res sluice.Result
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

func (s *scratch) reset() {
	clear(s.descs)
	clear(s.entries)
	clear(s.slots)
	clear(s.leases)
	clear(s.costs)
	s.d.Reset()
	s.descs, s.entries, s.slots, s.leases, s.costs = s.descs[:0], s.entries[:0], s.slots[:0], s.leases[:0], s.costs[:0]
	s.policy, s.buf, s.detail, s.invalid = s.policy[:0], s.buf[:0], "", ""
	s.resp, s.hits, s.charged = service.Response{}, 0, false
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sc := scratchPool.Get().(*scratch)
	if !h.check(w, r, sc) { // the client went away while a shaping delay was pending
		sc.reset()
		scratchPool.Put(sc)
		return
	}
	if sc.invalid != "" {
		h.releaseAll(r, sc.leases)
		headers.WriteProblem(w, headers.Problem{Type: "about:blank", Title: http.StatusText(http.StatusBadRequest),
			Status: http.StatusBadRequest, Detail: "the request cannot be rate limited: " + sc.invalid})
		sc.reset()
		scratchPool.Put(sc)
		return
	}
	if sc.d.Status != 0 {
		h.refuse(w, sc)
		h.refundCheck(r, sc)
		h.releaseAll(r, sc.leases)
		sc.reset()
		scratchPool.Put(sc)
		return
	}
	if h.settles && sc.charged {
		h.serveSettled(w, r, sc)
		return
	}
	if len(sc.leases) == 0 {
		sc.reset()
		scratchPool.Put(sc)
		h.next.ServeHTTP(w, r)
		return
	}
	leases := append([]func(context.Context) error(nil), sc.leases...)
	sc.reset()
	scratchPool.Put(sc)
	// Deferred, so the slots come back when the handler panics too.
	defer h.releaseAll(r, leases)
	h.next.ServeHTTP(w, r)
}

// check decides the request, all or nothing, into sc.d and writes the
// RateLimit fields. The concurrency slots are taken first: a refusal there
// asks nothing of the Checker, so a request shed with 503 charges no rate
// limit; a refusal by the Checker gives the slots back. It returns false
// when the request must be dropped silently.
func (h *Handler) check(w http.ResponseWriter, r *http.Request, sc *scratch) bool {
	ctx := r.Context()
	if h.acquire(r, sc) {
		h.checkRates(r, sc)
	}
	for i := range sc.slots {
		sl := &sc.slots[i]
		sc.d.AddLimit(sl.c.Name, sl.c.Limiter.Limit().Quota, 0, headers.ConcurrentRequests, &sl.res, sl.c.Shed)
	}
	if sc.d.Status == 0 && sc.d.Delay > h.cfg.MaxDelay {
		sc.d.Refuse(headers.Seconds(sc.d.Delay))
		sc.detail = "the request queue is longer than this server waits"
	}
	h.writeFields(w.Header(), sc)
	if sc.d.Status != 0 || sc.d.Delay <= 0 {
		return true
	}
	t := time.NewTimer(sc.d.Delay)
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		t.Stop()
		h.refundCheck(r, sc)
		h.releaseAll(r, sc.leases)
		return false
	}
}

// checkRates asks the Checker about the request's descriptors and adds its
// answer to sc.d.
func (h *Handler) checkRates(r *http.Request, sc *scratch) {
	if cap(sc.entries) < h.nEntries {
		sc.entries = make([]rules.Entry, 0, h.nEntries) // appends below must not move it
	}
	for _, desc := range h.cfg.Descriptors {
		start := len(sc.entries)
		for _, f := range desc {
			e, has := f(r)
			if !has {
				sc.entries = sc.entries[:start]
				break
			}
			sc.entries = append(sc.entries, e)
		}
		if len(sc.entries) > start {
			sc.descs = append(sc.descs, service.Descriptor{Entries: sc.entries[start:len(sc.entries):len(sc.entries)]})
		}
	}
	if len(sc.descs) == 0 {
		return
	}
	var hits uint64
	if h.cfg.Cost != nil {
		hits = h.cfg.Cost(r)
	}
	resp, err := h.cfg.Checker.Check(r.Context(), service.Request{Domain: h.cfg.Domain, Descriptors: sc.descs, Hits: hits})
	if err == nil && resp.OverallCode == service.CodeOK && h.charger != nil {
		sc.resp, sc.hits, sc.charged = resp, max(hits, 1), true // Request.Hits 0 means 1
	}
	if errors.Is(err, service.ErrInvalidRequest) {
		// The request's own keys cannot be limited (a header value over
		// the engine's limits, or not UTF-8): the client's doing, so it is
		// refused, fail-closed or not; passed through, it would let any
		// client skip every limit by sending one. Not told to OnError: a
		// client could flood it.
		sc.invalid = invalidDetail(err)
		return
	}
	if err != nil {
		if h.cfg.OnError != nil {
			h.cfg.OnError(r, fmt.Errorf("httplimit: check: %w", err))
		}
		if h.cfg.FailClosed {
			sc.d.Refuse(1)
			sc.detail = "the rate limit service is unavailable"
		}
		return
	}
	sc.d.Add(&resp)
	if h.releaser != nil && resp.Leases() {
		sc.leases = append(sc.leases, h.releaseFunc(resp))
	}
	if sc.d.Status == http.StatusServiceUnavailable {
		sc.detail = "the rate limit store is unavailable"
	}
}

// invalidDetail is what a 400 says of a request the Checker refused as
// invalid: the field and what is wrong with it, as the engine names them.
func invalidDetail(err error) string {
	var fe *service.FieldError
	var le *service.LimitError
	switch {
	case errors.As(err, &fe):
		return fe.Error()
	case errors.As(err, &le):
		return le.Error()
	}
	return err.Error()
}

// acquire takes the concurrency slots, in order, into sc.slots and
// sc.leases. On a refusal it gives back those already taken and reports
// false: the request goes no further.
func (h *Handler) acquire(r *http.Request, sc *scratch) bool {
	for i := range h.cfg.Concurrency {
		c := &h.cfg.Concurrency[i]
		key := ""
		if c.Key != nil {
			e, ok := c.Key(r)
			if !ok {
				continue
			}
			key = e.Key + "=" + e.Value
		}
		release, res, err := c.Limiter.Acquire(r.Context(), "httplimit:"+c.Name+":"+key)
		if err != nil {
			if h.cfg.OnError != nil {
				h.cfg.OnError(r, fmt.Errorf("httplimit: concurrency %s: %w", c.Name, err))
			}
			if h.cfg.FailClosed {
				h.giveBack(r, sc)
				sc.d.Refuse(1)
				sc.detail = "the rate limit store is unavailable"
				return false
			}
			continue
		}
		sc.slots = append(sc.slots, slot{c: c, res: res})
		if !res.Allowed {
			h.giveBack(r, sc)
			sc.detail = "too many requests in flight"
			return false
		}
		sc.leases = append(sc.leases, release)
	}
	return true
}

// giveBack releases the slots taken so far: the request is refused.
func (h *Handler) giveBack(r *http.Request, sc *scratch) {
	h.releaseAll(r, sc.leases)
	clear(sc.leases)
	sc.leases = sc.leases[:0]
}

// releaseFunc returns the release of the leases resp holds. It is a function
// of its own so that only requests holding leases pay for the closure.
func (h *Handler) releaseFunc(resp service.Response) func(context.Context) error {
	rel := h.releaser
	return func(ctx context.Context) error { return rel.Release(ctx, resp) }
}

// releaseAll gives back concurrency slots. It runs after the handler, when the
// request context may be cancelled, so it uses a context of its own.
func (h *Handler) releaseAll(r *http.Request, leases []func(context.Context) error) {
	if len(leases) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
	defer cancel()
	for _, release := range leases {
		if err := release(ctx); err != nil && h.cfg.OnError != nil {
			h.cfg.OnError(r, fmt.Errorf("httplimit: release: %w", err))
		}
	}
}

var (
	problemType        = []string{headers.ContentTypeProblem}
	noStore            = []string{"no-store"}
	keyRateLimit       = http.CanonicalHeaderKey(headers.RateLimit)
	keyRateLimitPolicy = http.CanonicalHeaderKey(headers.RateLimitPolicy)
	keyRetryAfter      = http.CanonicalHeaderKey(headers.RetryAfter)
)

// writeFields sets RateLimit, RateLimit-Policy and the legacy fields: the
// members edge.Decision chose, rendered without a map per response.
func (h *Handler) writeFields(hdr http.Header, sc *scratch) {
	d := &sc.d
	if len(d.Limits) == 0 {
		return
	}
	var err error
	sc.buf, err = headers.AppendServiceLimits(sc.buf[:0], d.Limits...)
	if err != nil {
		return // unreachable: names sanitized, numbers non-negative
	}
	policy := h.policyMember(d, 0)
	if len(d.Policies) > 1 {
		sc.policy = append(sc.policy[:0], policy...)
		for i := 1; i < len(d.Policies); i++ {
			sc.policy = append(sc.policy, ',', ' ')
			sc.policy = append(sc.policy, h.policyMember(d, i)...)
		}
		policy = string(sc.policy)
	}
	// One allocation backs both field values; each slice is capped at its
	// own element so an Add by the handler copies instead of overwriting.
	vals := &[2]string{string(sc.buf), policy}
	hdr[keyRateLimit] = vals[0:1:1]
	hdr[keyRateLimitPolicy] = vals[1:2:2]
	if h.cfg.Legacy && d.Legacy != nil {
		res := d.Legacy
		headers.SetLegacy(hdr, headers.NewLegacy(res.Limit, max(res.Remaining, 0), res.ResetAfter, h.cfg.Now()))
	}
}

// policyMember returns the RateLimit-Policy member d.Policies[i], rendered
// once through the structured-fields library and cached.
func (h *Handler) policyMember(d *edge.Decision, i int) string {
	p, r := &d.Policies[i], d.Rules[i]
	k := policyKey{name: p.Name, quota: p.Quota, window: p.Window, unit: p.Unit}
	if r != nil {
		// A rule's member never changes (rules are immutable; its quota
		// is the rule's): the pointer is the cheapest key.
		if s, ok := h.byRule.Get(r); ok {
			return s
		}
	} else if s, ok := h.policies.Get(k); ok {
		return s
	}
	s, err := headers.FormatPolicies(*p)
	if err != nil {
		s = `"invalid";q=0` // unreachable: names are sanitized and numbers bounded
	}
	if r != nil {
		h.byRule.Put(r, s)
	} else {
		h.policies.Put(k, s)
	}
	return s
}

// refuse writes a 429 or 503 with Retry-After and a problem+json body. It
// does as little as it can: this is the response an abuser makes us produce
// most.
func (h *Handler) refuse(w http.ResponseWriter, sc *scratch) {
	d := &sc.d
	hdr := w.Header()
	if d.RetryAfter > 0 {
		hdr[keyRetryAfter] = []string{strconv.FormatInt(d.RetryAfter, 10)}
	}
	var body []byte
	if d.Status == http.StatusTooManyRequests && len(d.Violated) == 1 && d.Reason == headers.ReasonLimited && sc.detail == "" {
		body = h.quotaBody(d) // the common case, rendered once per policy
	} else {
		sc.buf = d.Problem(sc.detail).Append(sc.buf[:0])
		body = sc.buf
	}
	// Shared values: nothing runs after us on this response to change them.
	// net/http adds Content-Length itself for a body this small.
	hdr["Content-Type"] = problemType
	hdr["Cache-Control"] = noStore
	noteRefused(w)
	w.WriteHeader(d.Status)
	_, _ = w.Write(body)
}

// quotaBody returns the problem+json body of a 429 refused by one policy.
// The returned slice is shared and must not be modified.
func (h *Handler) quotaBody(d *edge.Decision) []byte {
	name := d.Violated[0]
	if b, ok := h.bodies.Get(name); ok {
		return b
	}
	b := d.Problem("").Marshal()
	h.bodies.Put(name, b)
	return b
}
