// Package client is for Go programs that call rate-limited HTTP APIs. Its
// Transport is an http.RoundTripper that retries 429 and 503 responses the
// way a well-behaved client should — Retry-After first, else exponential
// backoff with full jitter, a bounded number of attempts, only idempotent
// requests unless told otherwise — and, optionally, paces requests from the
// server's RateLimit field so they rarely meet a 429 at all.
package client

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sluice-rl/sluice/headers"
)

// Defaults of the Transport's zero-valued fields.
const (
	DefaultMaxAttempts      = 4
	DefaultBaseDelay        = 100 * time.Millisecond
	DefaultMaxDelay         = 20 * time.Second
	DefaultMaxRetryAfter    = time.Minute
	DefaultRetryAfterJitter = 0.5
)

// Transport retries rate-limited requests and paces requests from RateLimit
// fields. The zero value is usable: it sends through http.DefaultTransport
// with the defaults above and no pacing.
//
// Set the fields before first use and do not change them afterwards; the
// Transport is then safe for concurrent use, and its pacing state is shared by
// every request sent through it.
type Transport struct {
	// Base sends the requests; nil means http.DefaultTransport.
	Base http.RoundTripper
	// MaxAttempts bounds the attempts per request, the first included; 0
	// means DefaultMaxAttempts, 1 disables retries.
	MaxAttempts int
	// BaseDelay and MaxDelay shape the backoff used when a 429 or 503 has no
	// usable Retry-After: before retry n (1-based) the Transport sleeps a
	// uniformly random time in [0, min(MaxDelay, BaseDelay·2^(n-1))) ("full
	// jitter"). Zero means DefaultBaseDelay / DefaultMaxDelay.
	BaseDelay time.Duration
	MaxDelay  time.Duration
	// MaxRetryAfter is the longest Retry-After the Transport waits out; a
	// response asking for more is returned to the caller as it is. Zero means
	// DefaultMaxRetryAfter.
	MaxRetryAfter time.Duration
	// RetryAfterJitter spreads retries that honour Retry-After: the wait is
	// Retry-After plus a uniformly random extra in [0, jitter × max(Retry-After,
	// BaseDelay)), so clients refused together do not come back together
	// (never earlier than the server asked). 0 means DefaultRetryAfterJitter;
	// negative disables the extra.
	RetryAfterJitter float64
	// A request whose body cannot be sent again (Body set, GetBody nil) is
	// never retried; http.NewRequest sets GetBody for bytes and strings
	// readers.
	//
	// RetryNonIdempotent retries every method. By default only GET, HEAD,
	// OPTIONS, TRACE, PUT and DELETE, and requests carrying an
	// Idempotency-Key or X-Idempotency-Key header, are retried.
	RetryNonIdempotent bool
	// Pacing turns on proactive pacing: the Transport reads the RateLimit
	// and RateLimit-Policy fields of responses and spreads the remaining
	// requests of each policy evenly over the time until its reset, instead
	// of spending them at once and meeting a 429.
	Pacing bool
	// RouteKey groups requests that meet the same policies, for pacing: a
	// request waits only for the policies that answered earlier requests with
	// its route key. Nil means method, host and path. Policies are always
	// kept per host, so hosts never slow each other down.
	RouteKey func(*http.Request) string

	// Test hooks; nil means the real thing.
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error
	rand  func() float64 // uniform in [0, 1)

	mu     sync.Mutex
	pacers map[policyKey]*pacer
	routes map[string][]policyKey // route key → policies seen on it
	blocks map[string]time.Time   // host → Retry-After without policy information
}

func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}

func (t *Transport) clock() time.Time {
	if t.now != nil {
		return t.now()
	}
	return time.Now()
}

func (t *Transport) random() float64 {
	if t.rand != nil {
		return t.rand()
	}
	return rand.Float64()
}

func (t *Transport) wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	if t.sleep != nil {
		return t.sleep(ctx, d)
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func orDefault[T int | time.Duration | float64](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	maxAttempts := orDefault(t.MaxAttempts, DefaultMaxAttempts)
	retryable := t.retryable(req)
	for attempt := 1; ; attempt++ {
		r := req
		if attempt > 1 {
			var err error
			if r, err = rewind(req); err != nil {
				return nil, err
			}
		}
		var held []*pacer
		if t.Pacing {
			var wait time.Duration
			wait, held = t.reserve(r)
			if err := t.wait(ctx, wait); err != nil {
				t.release(held)
				closeBody(r)
				return nil, fmt.Errorf("client: pacing %s %s: %w", r.Method, r.URL.Redacted(), err)
			}
		}
		resp, err := t.base().RoundTrip(r)
		now := t.clock()
		if t.Pacing {
			t.release(held)
			if resp != nil {
				t.observe(r, resp, now)
			}
		}
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
			return resp, nil
		}
		if !retryable || attempt >= maxAttempts || hopeless(resp) {
			return resp, nil
		}
		wait, ok := t.retryWait(resp, attempt, now)
		if !ok {
			return resp, nil
		}
		if dl, has := ctx.Deadline(); has && now.Add(wait).After(dl) {
			return resp, nil // the caller would rather have the answer than an error
		}
		drain(resp.Body)
		if err := t.wait(ctx, wait); err != nil {
			return nil, fmt.Errorf("client: waiting to retry %s %s: %w", req.Method, req.URL.Redacted(), err)
		}
	}
}

// retryable reports whether req may be sent again.
func (t *Transport) retryable(req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return false
	}
	if t.RetryNonIdempotent {
		return true
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	_, k1 := req.Header["Idempotency-Key"]
	_, k2 := req.Header["X-Idempotency-Key"]
	return k1 || k2
}

// rewind returns a copy of req with a fresh body.
func rewind(req *http.Request) (*http.Request, error) {
	r := req.Clone(req.Context())
	if req.Body == nil || req.Body == http.NoBody {
		return r, nil
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, fmt.Errorf("client: rewinding the body of %s %s: %w", req.Method, req.URL.Redacted(), err)
	}
	r.Body = body
	return r, nil
}

// retryWait returns how long to wait before the next attempt, or false when
// the server asks for longer than MaxRetryAfter.
func (t *Transport) retryWait(resp *http.Response, attempt int, now time.Time) (time.Duration, bool) {
	if v := resp.Header.Get(headers.RetryAfter); v != "" {
		if ra, ok := headers.ParseRetryAfter(v, now); ok {
			if ra > orDefault(t.MaxRetryAfter, DefaultMaxRetryAfter) {
				return 0, false
			}
			j := orDefault(t.RetryAfterJitter, DefaultRetryAfterJitter)
			if j > 0 {
				span := max(ra, orDefault(t.BaseDelay, DefaultBaseDelay))
				ra += time.Duration(j * t.random() * float64(span))
			}
			return ra, true
		}
	}
	ceil := orDefault(t.MaxDelay, DefaultMaxDelay)
	d := orDefault(t.BaseDelay, DefaultBaseDelay)
	for i := 1; i < attempt && d < ceil; i++ {
		d *= 2
	}
	d = min(d, ceil)
	return time.Duration(t.random() * float64(d)), true
}

// maxProblemBytes bounds the problem+json body hopeless reads.
const maxProblemBytes = 64 << 10

// hopeless reports whether a refusal says that no retry can succeed: a 429
// without Retry-After whose problem+json body gives the reason
// "cost_too_high" (the request costs more than the limit can ever admit).
// It reads the body, if it is a small problem+json one, and puts it back so
// the caller still gets it whole.
func hopeless(resp *http.Response) bool {
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get(headers.RetryAfter) != "" ||
		!strings.HasPrefix(resp.Header.Get("Content-Type"), headers.ContentTypeProblem) || resp.Body == nil {
		return false
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxProblemBytes+1))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), resp.Body), resp.Body}
	if err != nil || len(b) > maxProblemBytes {
		return false
	}
	p, err := headers.ParseProblem(b)
	return err == nil && p.Reason == headers.ReasonCostTooHigh
}

// drain reads a little of a body we are about to discard, so the connection
// can be reused, and closes it.
func drain(body io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, body, 64<<10)
	_ = body.Close()
}

func closeBody(r *http.Request) {
	if r.Body != nil {
		_ = r.Body.Close()
	}
}
