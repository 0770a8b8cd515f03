// Package httplimit puts Sluice in front of HTTP handlers: a net/http
// middleware (New) and a reverse-proxy gateway (NewGateway) that ask the
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
package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/headers"
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
	// Cost returns what a request costs (Request.Hits); nil means 1.
	Cost func(*http.Request) uint64
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
	// failure modes decide; this is for remote Checkers).
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

// Handler is the middleware. It is safe for concurrent use.
type Handler struct {
	next     http.Handler
	cfg      Config
	nEntries int
	releaser Releaser // cfg.Checker, when it can release leases

	mu       sync.Mutex                             // serializes cache writers
	policies atomic.Pointer[map[*rules.Rule]string] // rendered RateLimit-Policy members, copy-on-write
	bodies   atomic.Pointer[map[string][]byte]      // 429 bodies by violated policy, copy-on-write
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
	if len(errs) > 0 {
		return nil, fmt.Errorf("httplimit: New: %w", errors.Join(errs...))
	}
	if cfg.MaxDelay == 0 {
		cfg.MaxDelay = DefaultMaxDelay
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	h := &Handler{next: next, cfg: cfg, nEntries: n}
	h.releaser, _ = cfg.Checker.(Releaser)
	h.policies.Store(&map[*rules.Rule]string{})
	h.bodies.Store(&map[string][]byte{})
	return h, nil
}

// scratch is one request's working memory, pooled.
type scratch struct {
	descs   []service.Descriptor
	entries []rules.Entry
	limits  []headers.ServiceLimit
	policy  []byte
	// policyStr is the RateLimit-Policy value when it is one cached member,
	// so the common case sends the cached string without copying it.
	policyStr string
	nPolicy   int
	buf       []byte
	names     []string
	leases    []func(context.Context) error
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

func (s *scratch) reset() {
	clear(s.descs)
	clear(s.entries)
	clear(s.limits)
	clear(s.names)
	clear(s.leases)
	s.descs, s.entries, s.limits, s.names, s.leases = s.descs[:0], s.entries[:0], s.limits[:0], s.names[:0], s.leases[:0]
	s.policy, s.buf = s.policy[:0], s.buf[:0]
	s.policyStr, s.nPolicy = "", 0
}

// decision is what ServeHTTP does with a request after the checks.
type decision struct {
	status     int // 0: serve; else 429 or 503
	retryAfter int64
	delay      time.Duration
	detail     string
	legacy     *service.Status
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sc := scratchPool.Get().(*scratch)
	d, ok := h.check(w, r, sc)
	if !ok { // the client went away while a shaping delay was pending
		sc.reset()
		scratchPool.Put(sc)
		return
	}
	if d.status != 0 {
		h.refuse(w, d, sc)
		h.releaseAll(r, sc.leases)
		sc.reset()
		scratchPool.Put(sc)
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

// check runs the rate check and the concurrency acquisitions and writes the
// RateLimit fields. ok is false when the request must be dropped silently.
func (h *Handler) check(w http.ResponseWriter, r *http.Request, sc *scratch) (d decision, ok bool) {
	ctx := r.Context()
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
	hdr := w.Header()
	if len(sc.descs) > 0 {
		var hits uint64
		if h.cfg.Cost != nil {
			hits = h.cfg.Cost(r)
		}
		resp, err := h.cfg.Checker.Check(ctx, service.Request{Domain: h.cfg.Domain, Descriptors: sc.descs, Hits: hits})
		if err != nil {
			if h.cfg.OnError != nil {
				h.cfg.OnError(r, fmt.Errorf("httplimit: check: %w", err))
			}
			if h.cfg.FailClosed {
				return decision{status: http.StatusServiceUnavailable, retryAfter: 1, detail: "the rate limit service is unavailable"}, true
			}
		} else {
			d = h.render(sc, &resp)
			if h.releaser != nil && resp.Leases() {
				sc.leases = append(sc.leases, h.releaseFunc(resp))
			}
		}
	}
	if d.status == 0 {
		if d2 := h.acquire(r, sc); d2.status != 0 {
			d.status, d.retryAfter, d.detail = d2.status, d2.retryAfter, d2.detail
		}
	}
	h.writeFields(hdr, sc, &d)
	if d.status == 0 && d.delay > 0 {
		if d.delay > h.cfg.MaxDelay {
			return decision{status: http.StatusServiceUnavailable, retryAfter: headers.Seconds(d.delay),
				detail: "the request queue is longer than this server waits"}, true
		}
		t := time.NewTimer(d.delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			h.releaseAll(r, sc.leases)
			return d, false
		}
	}
	return d, true
}

// render turns the engine's statuses into RateLimit members (in sc.limits),
// RateLimit-Policy members (sc.appendPolicy) and the decision.
func (h *Handler) render(sc *scratch, resp *service.Response) decision {
	var d decision
	var minRemaining int64 = -1
	storeDown := false
	for i := range resp.Statuses {
		st := &resp.Statuses[i]
		if st.Rule != nil && st.Rule.ShadowMode {
			continue // counted, never enforced, and not advertised
		}
		if st.Degraded == service.OutcomeFailedClosed && st.Code == service.CodeOverLimit {
			storeDown = true
			continue
		}
		if st.CurrentLimit == nil || st.Unlimited || st.Result == (sluice.Result{}) {
			continue // no rule, unlimited, or no store answer (failed open)
		}
		res := &st.Result
		name := policyName(st)
		reset := headers.Seconds(res.ResetAfter)
		if st.Code == service.CodeOverLimit {
			if res.Reason == sluice.ReasonLimited {
				// t of a refused policy is when this request would pass, the
				// moment Retry-After names.
				reset = max(headers.Seconds(res.RetryAfter), 1)
				d.retryAfter = max(d.retryAfter, reset)
			}
			sc.names = append(sc.names, name)
		}
		d.delay = max(d.delay, res.Delay)
		remaining := max(res.Remaining, 0)
		sc.limits = append(sc.limits, headers.ServiceLimit{Name: name, Remaining: remaining, Reset: reset})
		sc.appendPolicy(h.policyMember(st, name))
		if minRemaining < 0 || remaining < minRemaining || st.Code == service.CodeOverLimit {
			minRemaining = remaining
			d.legacy = st
		}
	}
	switch {
	case len(sc.names) > 0:
		d.status = http.StatusTooManyRequests
		if d.retryAfter == 0 {
			d.detail = "the request costs more than the quota can ever admit"
		}
	case storeDown:
		d.status = http.StatusServiceUnavailable
		d.retryAfter = 1
		d.detail = "the rate limit store is unavailable"
	}
	return d
}

// policyName names a status's policy: the rule's name, else its ID (the path
// of keys in the rule file), else the remote limit's name or unit.
func policyName(st *service.Status) string {
	switch {
	case st.Rule != nil && st.Rule.Name != "":
		return headers.PolicyName(st.Rule.Name)
	case st.Rule != nil:
		return headers.PolicyName(st.Rule.ID)
	case st.CurrentLimit.Name != "":
		return headers.PolicyName(st.CurrentLimit.Name)
	case st.CurrentLimit.Unit != "":
		return "per_" + st.CurrentLimit.Unit
	}
	return "limit"
}

// appendPolicy adds one RateLimit-Policy member.
func (s *scratch) appendPolicy(member string) {
	s.nPolicy++
	if s.nPolicy == 1 {
		s.policyStr = member
		return
	}
	if s.nPolicy == 2 {
		s.policy = append(s.policy[:0], s.policyStr...)
		s.policyStr = ""
	}
	s.policy = append(s.policy, ',', ' ')
	s.policy = append(s.policy, member...)
}

// policyValue returns the RateLimit-Policy field value.
func (s *scratch) policyValue() string {
	if s.nPolicy == 1 {
		return s.policyStr
	}
	return string(s.policy)
}

// policyMember returns the RateLimit-Policy member of a status, rendered once
// per rule through the structured-fields library and cached.
func (h *Handler) policyMember(st *service.Status, name string) string {
	if st.Rule != nil {
		if s, ok := (*h.policies.Load())[st.Rule]; ok {
			return s
		}
	}
	p := headers.Policy{Name: name, Quota: st.Result.Limit}
	window := st.CurrentLimit.Window
	if st.Rule != nil {
		window = st.Rule.Limit.Window
		if st.Rule.Limit.Algorithm == sluice.Concurrency {
			p.Unit = headers.ConcurrentRequests
			window = 0
		}
	}
	p.Window = headers.Seconds(window)
	s, err := headers.FormatPolicies(p)
	if err != nil {
		s = `"invalid";q=0` // unreachable: names are sanitized and numbers bounded
	}
	if st.Rule != nil {
		// Rules are immutable and few; a reload brings new ones, so the
		// cache starts over when it grows past any sane rule count.
		h.mu.Lock()
		old := *h.policies.Load()
		m := make(map[*rules.Rule]string, len(old)+1)
		if len(old) < 4096 {
			for k, v := range old {
				m[k] = v
			}
		}
		m[st.Rule] = s
		h.policies.Store(&m)
		h.mu.Unlock()
	}
	return s
}

// acquire takes the concurrency slots, in order; on a refusal it gives back
// those already taken.
func (h *Handler) acquire(r *http.Request, sc *scratch) decision {
	for _, c := range h.cfg.Concurrency {
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
				h.releaseAll(r, sc.leases)
				sc.leases = sc.leases[:0]
				return decision{status: http.StatusServiceUnavailable, retryAfter: 1, detail: "the rate limit store is unavailable"}
			}
			continue
		}
		name := headers.PolicyName(c.Name)
		sc.limits = append(sc.limits, headers.ServiceLimit{Name: name, Remaining: max(res.Remaining, 0), Reset: -1})
		sc.appendPolicy(concurrencyPolicy(name, c.Limiter.Limit().Quota))
		if !res.Allowed {
			h.releaseAll(r, sc.leases)
			sc.leases = sc.leases[:0]
			sc.names = append(sc.names[:0], name)
			if c.Shed {
				return decision{status: http.StatusServiceUnavailable, retryAfter: 1, detail: "too many requests in flight"}
			}
			return decision{status: http.StatusTooManyRequests, retryAfter: 1, detail: "too many requests in flight"}
		}
		sc.leases = append(sc.leases, release)
	}
	return decision{}
}

func concurrencyPolicy(name string, quota int64) string {
	s, err := headers.FormatPolicies(headers.Policy{Name: name, Quota: quota, Unit: headers.ConcurrentRequests})
	if err != nil {
		return `"invalid";q=0` // unreachable: the name is sanitized, the quota bounded
	}
	return s
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
)

// writeFields sets RateLimit, RateLimit-Policy and the legacy fields.
func (h *Handler) writeFields(hdr http.Header, sc *scratch, d *decision) {
	if len(sc.limits) == 0 {
		return
	}
	var err error
	sc.buf, err = headers.AppendServiceLimits(sc.buf[:0], sc.limits...)
	if err != nil {
		return // unreachable: names sanitized, numbers non-negative
	}
	// One allocation backs both field values; each slice is capped at its
	// own element so an Add by the handler copies instead of overwriting.
	vals := &[2]string{string(sc.buf), sc.policyValue()}
	hdr[keyRateLimit] = vals[0:1:1]
	hdr[keyRateLimitPolicy] = vals[1:2:2]
	if h.cfg.Legacy && d.legacy != nil {
		res := d.legacy.Result
		headers.SetLegacy(hdr, headers.NewLegacy(res.Limit, max(res.Remaining, 0), res.ResetAfter, h.cfg.Now()))
	}
}

// refuse writes a 429 or 503 with Retry-After and a problem+json body. It
// does as little as it can: this is the response an abuser makes us produce
// most.
func (h *Handler) refuse(w http.ResponseWriter, d decision, sc *scratch) {
	hdr := w.Header()
	if d.retryAfter > 0 {
		hdr["Retry-After"] = []string{strconv.FormatInt(d.retryAfter, 10)}
	}
	var body []byte
	switch {
	case d.status == http.StatusTooManyRequests && len(sc.names) == 1 && d.detail == "":
		body = h.quotaBody(sc.names[0]) // the common case, rendered once per policy
	case d.status == http.StatusTooManyRequests:
		sc.buf = headers.QuotaExceeded(sc.names, d.detail).Append(sc.buf[:0])
		body = sc.buf
	default:
		sc.buf = headers.Unavailable(d.detail).Append(sc.buf[:0])
		body = sc.buf
	}
	// Shared values: nothing runs after us on this response to change them.
	// net/http adds Content-Length itself for a body this small.
	hdr["Content-Type"] = problemType
	hdr["Cache-Control"] = noStore
	w.WriteHeader(d.status)
	_, _ = w.Write(body)
}

// quotaBody returns the problem+json body of a 429 refused by one policy.
// The returned slice is shared and must not be modified.
func (h *Handler) quotaBody(name string) []byte {
	if b, ok := (*h.bodies.Load())[name]; ok {
		return b
	}
	b := headers.QuotaExceeded([]string{name}, "").Marshal()
	h.mu.Lock()
	old := *h.bodies.Load()
	m := make(map[string][]byte, len(old)+1)
	if len(old) < 4096 { // names come from rules; bound it anyway
		for k, v := range old {
			m[k] = v
		}
	}
	m[name] = b
	h.bodies.Store(&m)
	h.mu.Unlock()
	return b
}
