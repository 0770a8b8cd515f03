package httplimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/headers"
	"github.com/sluice-rl/sluice/headers/edge"
	"github.com/sluice-rl/sluice/store/stack"
)

// ErrSkip is what a LimitKey returns to let a request through unlimited (a
// health check, an internal caller). Any other error answers 400.
var ErrSkip = errors.New("httplimit: request not limited")

// LimitKey names the counter a request is limited by: the client's address,
// its API key, its user. It returns ErrSkip (or an error wrapping it) to
// leave the request unlimited, and any other error to refuse it with 400,
// the error's text in the problem's detail (so it must not hold secrets).
type LimitKey func(r *http.Request) (string, error)

// IPKey keys requests by client address, believing X-Forwarded-For and
// Forwarded only as far as trusted lets them (see TrustedProxies.ClientIP);
// a nil trusted uses the peer address alone. A request whose address cannot
// be read is refused with 400.
func IPKey(trusted *TrustedProxies) LimitKey {
	return func(r *http.Request) (string, error) {
		ip, ok := trusted.ClientIP(r)
		if !ok {
			return "", fmt.Errorf("no client address in %q", r.RemoteAddr)
		}
		return ip, nil
	}
}

// HeaderKey keys requests by the value of header (an API key, a tenant).
// A request without the header is refused with 400 unless skipMissing, which
// lets it through unlimited.
func HeaderKey(header string, skipMissing bool) LimitKey {
	return func(r *http.Request) (string, error) {
		if v := r.Header.Get(header); v != "" {
			return v, nil
		}
		if skipMissing {
			return "", ErrSkip
		}
		return "", fmt.Errorf("missing header %s", header)
	}
}

// LimitOptions tunes Limit. The zero value is ready to use.
type LimitOptions struct {
	// Name is the policy name in RateLimit, RateLimit-Policy and a 429's
	// violated-policies; "" means "default". It is made printable ASCII
	// with headers.PolicyName.
	Name string
	// Cost returns what a request costs, in the limit's units; nil, and a
	// result below 1, mean 1. Ignored for a concurrency limit (one slot per
	// request).
	Cost func(*http.Request) int64
	// FailClosed answers 503 when the store cannot decide (Redis down); by
	// default the request goes through unlimited, as Envoy does. Either
	// way the error goes to OnError.
	FailClosed bool
	// Legacy also sends X-RateLimit-Limit, -Remaining, -Reset and -Used.
	Legacy bool
	// MaxDelay bounds how long a request a leaky_bucket limit admitted with
	// a Delay is held before the handler runs; a longer Delay is answered
	// 503 (the units it took are not given back). Zero means
	// DefaultMaxDelay.
	MaxDelay time.Duration
	// OnError, if set, is told about store errors (for logging; the
	// middleware does not log). It is not told about LimitKey errors,
	// which are the client's.
	OnError func(r *http.Request, err error)
	// Now is the clock for X-RateLimit-Reset; nil means time.Now.
	Now func() time.Time
}

// Limit returns a middleware that limits the requests to next with l, one
// counter per key (key(r)): the front door for a program that wants a
// per-IP or per-API-key limit without a rule file or an engine. It answers
// as the engine's middleware (New) does, through headers/edge: every limited
// response carries RateLimit and RateLimit-Policy (and X-RateLimit-* with
// Legacy); a refusal is a 429 with Retry-After and an
// application/problem+json body (reason "limited", or "cost_too_high" with
// no Retry-After when the cost exceeds what the limit can ever admit); a
// store that cannot decide lets the request through, or answers 503 with
// FailClosed.
//
// A concurrency limit (sluice.Concurrency) holds its slot from before next
// runs until it returns — also when it panics. A leaky_bucket limit holds
// an admitted request for its Delay before next runs (up to MaxDelay).
//
// The handler is safe for concurrent use; l may be shared with other code.
func Limit(next http.Handler, l *sluice.Limiter, key LimitKey, opts LimitOptions) (http.Handler, error) {
	var errs []error
	if next == nil {
		errs = append(errs, errors.New("next handler is nil"))
	}
	if l == nil {
		errs = append(errs, errors.New("limiter is nil"))
	}
	if key == nil {
		errs = append(errs, errors.New("key function is nil"))
	}
	if opts.MaxDelay < 0 {
		errs = append(errs, fmt.Errorf("LimitOptions.MaxDelay %v is negative", opts.MaxDelay))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("httplimit: Limit: %w", errors.Join(errs...))
	}
	if opts.Name == "" {
		opts.Name = "default"
	}
	if opts.MaxDelay == 0 {
		opts.MaxDelay = DefaultMaxDelay
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &limited{next: next, l: l, key: key, opts: opts, name: headers.PolicyName(opts.Name)}, nil
}

// limited is the handler Limit returns.
type limited struct {
	next http.Handler
	l    *sluice.Limiter
	key  LimitKey
	opts LimitOptions
	name string
}

func (h *limited) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	k, err := h.key(r)
	if errors.Is(err, ErrSkip) {
		h.next.ServeHTTP(w, r)
		return
	}
	if err != nil {
		headers.WriteProblem(w, headers.Problem{Type: "about:blank", Title: http.StatusText(http.StatusBadRequest),
			Status: http.StatusBadRequest, Detail: "the request cannot be rate limited: " + err.Error()})
		return
	}
	ctx := r.Context()
	lim := h.l.Limit()
	var (
		res     sluice.Result
		release func(context.Context) error
	)
	if lim.Algorithm == sluice.Concurrency {
		release, res, err = h.l.Acquire(ctx, k)
	} else {
		cost := int64(1)
		if h.opts.Cost != nil {
			cost = max(h.opts.Cost(r), 1)
		}
		res, err = h.l.AllowN(ctx, k, cost)
	}
	if err != nil {
		if h.opts.OnError != nil {
			h.opts.OnError(r, fmt.Errorf("httplimit: Limit: key %q: %w", k, err))
		}
		if !h.opts.FailClosed {
			h.next.ServeHTTP(w, r)
			return
		}
		var d edge.Decision
		d.Refuse(1)
		h.refuse(w, &d, "the rate limit could not be decided")
		return
	}
	var d edge.Decision
	quota, window, unit := policyOf(lim, res)
	d.AddLimit(h.name, quota, window, unit, &res, false)
	detail := ""
	if d.Status == 0 && d.Delay > h.opts.MaxDelay {
		d.Refuse(headers.Seconds(d.Delay))
		detail = "the request queue is longer than this server waits"
	}
	hdr := w.Header()
	d.Write(hdr)
	if h.opts.Legacy && d.Legacy != nil {
		headers.SetLegacy(hdr, headers.NewLegacy(d.Legacy.Limit, max(d.Legacy.Remaining, 0), d.Legacy.ResetAfter, h.opts.Now()))
	}
	if d.Status != 0 {
		if release != nil {
			_ = release(context.WithoutCancel(ctx))
		}
		h.refuse(w, &d, detail)
		return
	}
	if d.Delay > 0 {
		t := time.NewTimer(d.Delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return // the client went away while queued
		}
	}
	if release != nil {
		// Deferred, so the slot comes back when next panics too.
		defer func() {
			if err := release(context.WithoutCancel(ctx)); err != nil && h.opts.OnError != nil {
				h.opts.OnError(r, fmt.Errorf("httplimit: Limit: release key %q: %w", k, err))
			}
		}()
	}
	h.next.ServeHTTP(w, r)
}

// refuse writes d's 429 or 503: Retry-After, no-store, the problem+json body.
func (h *limited) refuse(w http.ResponseWriter, d *edge.Decision, detail string) {
	hdr := w.Header()
	if d.RetryAfter > 0 {
		hdr[keyRetryAfter] = []string{strconv.FormatInt(d.RetryAfter, 10)}
	}
	hdr["Content-Type"] = problemType
	hdr["Cache-Control"] = noStore
	noteRefused(w)
	w.WriteHeader(d.Status)
	_, _ = w.Write(d.Problem(detail).Marshal())
}

// policyOf is the RateLimit-Policy quota, window and unit of lim: a
// concurrency limit is advertised in concurrent requests with no window;
// a bucket algorithm's quota is its burst (res.Limit), published with the
// time its rate takes to refill the burst, so that q/w is the rate (as
// headers/edge does for rules).
func policyOf(lim sluice.Limit, res sluice.Result) (quota int64, window time.Duration, unit headers.QuotaUnit) {
	if lim.Algorithm == sluice.Concurrency {
		return lim.Quota, 0, headers.ConcurrentRequests
	}
	quota, window = res.Limit, lim.Window
	if quota <= 0 {
		quota = lim.Quota
	}
	if stack.HasBurst(lim.Algorithm) && quota != lim.Quota && lim.Quota > 0 {
		secs := math.Ceil(float64(quota) * window.Seconds() / float64(lim.Quota))
		window = time.Duration(min(secs, float64(math.MaxInt64/int64(time.Second))) * float64(time.Second))
	}
	return quota, window, headers.Requests
}
