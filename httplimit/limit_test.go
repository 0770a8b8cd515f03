package httplimit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/headers"
	"github.com/sluice-rl/sluice/httplimit"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/storetest"
)

// limitStep is one request through the Limit middleware and what must come
// back.
type limitStep struct {
	advance    time.Duration // clock advance before the request
	ip         string        // RemoteAddr host
	header     string        // X-API-Key, for the HeaderKey cases
	status     int
	rateLimit  string // RateLimit, exactly ("-" for absent)
	retryAfter string
	reason     string // the problem's reason, for refusals
}

// stores returns the stores every Limit table runs on: memory on clock, and
// a real Redis on the same clock (skipped when redis-server is absent,
// outside CI).
func stores(t *testing.T, clock *storetest.Clock) map[string]func(t *testing.T) sluice.Store {
	return map[string]func(t *testing.T) sluice.Store{
		"memory": func(t *testing.T) sluice.Store {
			s := memory.New(memory.Options{Now: clock.Now})
			t.Cleanup(func() { s.Close() })
			return s
		},
		"redis": func(t *testing.T) sluice.Store {
			srv := redistest.Start(t)
			s, err := redis.New(redis.Options{URL: srv.URL(), Now: clock.Now, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatalf("redis.New: %v", err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
	}
}

func TestLimit(t *testing.T) {
	tests := []struct {
		name  string
		limit sluice.Limit
		key   httplimit.LimitKey
		opts  httplimit.LimitOptions
		steps []limitStep
	}{
		{
			name:  "fixed window per IP",
			limit: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 2, Window: time.Minute},
			key:   httplimit.IPKey(nil),
			opts:  httplimit.LimitOptions{Name: "per_ip"},
			steps: []limitStep{
				{ip: "192.0.2.1", status: 200, rateLimit: `"per_ip";r=1;t=60`},
				{ip: "192.0.2.1", status: 200, rateLimit: `"per_ip";r=0;t=60`},
				{ip: "192.0.2.1", status: 429, rateLimit: `"per_ip";r=0;t=60`, retryAfter: "60", reason: headers.ReasonLimited},
				{ip: "192.0.2.2", status: 200, rateLimit: `"per_ip";r=1;t=60`},
				{advance: time.Minute, ip: "192.0.2.1", status: 200, rateLimit: `"per_ip";r=1;t=60`},
			},
		},
		{
			name:  "gcra default name",
			limit: sluice.Limit{Algorithm: sluice.GCRA, Quota: 1, Window: time.Second},
			key:   httplimit.IPKey(nil),
			steps: []limitStep{
				{ip: "192.0.2.1", status: 200, rateLimit: `"default";r=0;t=1`},
				{ip: "192.0.2.1", status: 429, rateLimit: `"default";r=0;t=1`, retryAfter: "1", reason: headers.ReasonLimited},
				{advance: time.Second, ip: "192.0.2.1", status: 200, rateLimit: `"default";r=0;t=1`},
			},
		},
		{
			name:  "cost too high: no Retry-After",
			limit: sluice.Limit{Algorithm: sluice.TokenBucket, Quota: 5, Window: time.Second},
			key:   httplimit.IPKey(nil),
			opts:  httplimit.LimitOptions{Name: "bytes", Cost: func(*http.Request) int64 { return 6 }},
			steps: []limitStep{
				{ip: "192.0.2.1", status: 429, rateLimit: `"bytes";r=5;t=0`, retryAfter: "", reason: headers.ReasonCostTooHigh},
			},
		},
		{
			name:  "header key: missing is 400, skip lets through",
			limit: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1, Window: time.Minute},
			key:   httplimit.HeaderKey("X-API-Key", false),
			steps: []limitStep{
				{header: "alice", status: 200, rateLimit: `"default";r=0;t=60`},
				{header: "alice", status: 429, rateLimit: `"default";r=0;t=60`, retryAfter: "60", reason: headers.ReasonLimited},
				{header: "", status: 400, rateLimit: "-"},
			},
		},
		{
			name:  "leaky bucket delay over MaxDelay is 503",
			limit: sluice.Limit{Algorithm: sluice.LeakyBucket, Quota: 1, Window: time.Second, Burst: 10},
			key:   httplimit.IPKey(nil),
			opts:  httplimit.LimitOptions{MaxDelay: time.Millisecond},
			steps: []limitStep{
				{ip: "192.0.2.1", status: 200, rateLimit: `"default";r=9;t=1`},
				{ip: "192.0.2.1", status: 503, rateLimit: `"default";r=8;t=2`, retryAfter: "1", reason: headers.ReasonUnavailable},
			},
		},
		{
			name:  "skip",
			limit: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1, Window: time.Minute},
			key:   httplimit.HeaderKey("X-API-Key", true),
			steps: []limitStep{
				{header: "", status: 200, rateLimit: "-"},
				{header: "", status: 200, rateLimit: "-"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := storetest.NewClock()
			for sname, newStore := range stores(t, clock) {
				t.Run(sname, func(t *testing.T) {
					l, err := sluice.NewLimiter(newStore(t), tc.limit)
					if err != nil {
						t.Fatalf("NewLimiter: %v", err)
					}
					var served atomic.Int64
					next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served.Add(1) })
					h, err := httplimit.Limit(next, l, tc.key, tc.opts)
					if err != nil {
						t.Fatalf("Limit: %v", err)
					}
					wantServed := int64(0)
					for i, s := range tc.steps {
						clock.Advance(s.advance)
						r := httptest.NewRequest("GET", "/", nil)
						if s.ip != "" {
							r.RemoteAddr = s.ip + ":1234"
						}
						if s.header != "" {
							r.Header.Set("X-API-Key", s.header)
						}
						w := httptest.NewRecorder()
						h.ServeHTTP(w, r)
						checkStep(t, i, s, w)
						if s.status == 200 {
							wantServed++
						}
						if got := served.Load(); got != wantServed {
							t.Fatalf("step %d: next ran %d times, want %d", i, got, wantServed)
						}
					}
				})
			}
		})
	}
}

func checkStep(t *testing.T, i int, s limitStep, w *httptest.ResponseRecorder) {
	t.Helper()
	if w.Code != s.status {
		t.Fatalf("step %d: status %d, want %d (body %s)", i, w.Code, s.status, w.Body)
	}
	got := w.Header().Get(headers.RateLimit)
	if len(w.Header().Values(headers.RateLimit)) == 0 {
		got = "-"
	}
	if got != s.rateLimit {
		t.Errorf("step %d: RateLimit %q, want %q", i, got, s.rateLimit)
	}
	if s.rateLimit != "-" && w.Header().Get(headers.RateLimitPolicy) == "" {
		t.Errorf("step %d: no RateLimit-Policy beside RateLimit %q", i, got)
	}
	if got := w.Header().Get(headers.RetryAfter); got != s.retryAfter {
		t.Errorf("step %d: Retry-After %q, want %q", i, got, s.retryAfter)
	}
	if s.status == 429 || s.status == 503 || s.status == 400 {
		if ct := w.Header().Get("Content-Type"); ct != headers.ContentTypeProblem {
			t.Errorf("step %d: Content-Type %q, want %q", i, ct, headers.ContentTypeProblem)
		}
		p, err := headers.ParseProblem(w.Body.Bytes())
		if err != nil {
			t.Fatalf("step %d: body %s: %v", i, w.Body, err)
		}
		if p.Status != s.status || p.Reason != s.reason {
			t.Errorf("step %d: problem status %d reason %q, want %d %q", i, p.Status, p.Reason, s.status, s.reason)
		}
	}
}

// TestLimitPolicyMatchesEngine: RateLimit-Policy of a bucket limit publishes
// the burst with the time the rate refills it, as the engine's middleware does.
func TestLimitPolicy(t *testing.T) {
	tests := []struct {
		limit sluice.Limit
		want  string
	}{
		{sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 100, Window: time.Minute}, `"p";q=100;w=60`},
		{sluice.Limit{Algorithm: sluice.TokenBucket, Quota: 10, Window: time.Second, Burst: 5}, `"p";q=5;w=1`},
		{sluice.Limit{Algorithm: sluice.TokenBucket, Quota: 10, Window: time.Second, Burst: 30}, `"p";q=30;w=3`},
		{sluice.Limit{Algorithm: sluice.Concurrency, Quota: 4, Window: time.Minute}, `"p";q=4;qu="concurrent-requests"`},
	}
	for _, tc := range tests {
		s := memory.New(memory.Options{})
		l, err := sluice.NewLimiter(s, tc.limit)
		if err != nil {
			t.Fatalf("%v: NewLimiter: %v", tc.limit, err)
		}
		h, err := httplimit.Limit(http.NotFoundHandler(), l, httplimit.IPKey(nil), httplimit.LimitOptions{Name: "p"})
		if err != nil {
			t.Fatalf("Limit: %v", err)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if got := w.Header().Get(headers.RateLimitPolicy); got != tc.want {
			t.Errorf("%v: RateLimit-Policy %q, want %q", tc.limit, got, tc.want)
		}
		s.Close()
	}
}

// TestLimitConcurrency: the slot is held while next runs and comes back when
// it returns or panics.
func TestLimitConcurrency(t *testing.T) {
	clock := storetest.NewClock()
	for sname, newStore := range stores(t, clock) {
		t.Run(sname, func(t *testing.T) {
			l, err := sluice.NewLimiter(newStore(t), sluice.Limit{Algorithm: sluice.Concurrency, Quota: 1, Window: time.Minute})
			if err != nil {
				t.Fatalf("NewLimiter: %v", err)
			}
			var inner http.Handler
			next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/nested": // a second request while the first holds the slot
					w2 := httptest.NewRecorder()
					inner.ServeHTTP(w2, httptest.NewRequest("GET", "/", nil))
					fmt.Fprintf(w, "%d", w2.Code)
				case "/panic":
					panic(http.ErrAbortHandler)
				}
			})
			h, err := httplimit.Limit(next, l, httplimit.IPKey(nil), httplimit.LimitOptions{Name: "inflight"})
			if err != nil {
				t.Fatalf("Limit: %v", err)
			}
			inner = h
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/nested", nil))
			if w.Code != 200 || w.Body.String() != "429" {
				t.Fatalf("nested: outer %d, inner %q; want 200 and 429 (slot held while next runs)", w.Code, w.Body)
			}
			func() {
				defer func() { _ = recover() }()
				h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/panic", nil))
			}()
			w = httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
			if w.Code != 200 {
				t.Fatalf("after a panic: status %d, want 200 (slot given back)", w.Code)
			}
			if got, want := w.Header().Get(headers.RateLimit), `"inflight";r=0`; got != want {
				t.Errorf("RateLimit %q, want %q", got, want)
			}
		})
	}
}

// TestLimitStoreDown: with Redis gone, the request goes through by default
// and is answered 503 with FailClosed; OnError hears of it either way.
func TestLimitStoreDown(t *testing.T) {
	srv := redistest.Start(t)
	s, err := redis.New(redis.Options{URL: srv.URL(), Timeout: time.Second})
	if err != nil {
		t.Fatalf("redis.New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	l, err := sluice.NewLimiter(s, sluice.Limit{Algorithm: sluice.GCRA, Quota: 10, Window: time.Second})
	if err != nil {
		t.Fatalf("NewLimiter: %v", err)
	}
	srv.Kill()
	for _, tc := range []struct {
		failClosed bool
		status     int
	}{{false, 200}, {true, 503}} {
		var errs atomic.Int64
		h, err := httplimit.Limit(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), l, httplimit.IPKey(nil),
			httplimit.LimitOptions{FailClosed: tc.failClosed, OnError: func(*http.Request, error) { errs.Add(1) }})
		if err != nil {
			t.Fatalf("Limit: %v", err)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code != tc.status || errs.Load() != 1 {
			t.Errorf("FailClosed=%v: status %d, OnError called %d times; want %d, 1", tc.failClosed, w.Code, errs.Load(), tc.status)
		}
		if tc.failClosed {
			if got := w.Header().Get(headers.RetryAfter); got != "1" {
				t.Errorf("503 Retry-After %q, want 1", got)
			}
			if p, err := headers.ParseProblem(w.Body.Bytes()); err != nil || p.Reason != headers.ReasonUnavailable {
				t.Errorf("503 body %s (%v), want reason %q", w.Body, err, headers.ReasonUnavailable)
			}
			if strings.Contains(w.Body.String(), srv.Addr()) {
				t.Errorf("503 body names the Redis address: %s", w.Body)
			}
		}
	}
}

func TestLimitConfigErrors(t *testing.T) {
	s := memory.New(memory.Options{})
	defer s.Close()
	l, err := sluice.NewLimiter(s, sluice.Limit{Algorithm: sluice.GCRA, Quota: 1, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ok := http.NotFoundHandler()
	for _, tc := range []struct {
		next http.Handler
		l    *sluice.Limiter
		key  httplimit.LimitKey
		opts httplimit.LimitOptions
		want string
	}{
		{nil, l, httplimit.IPKey(nil), httplimit.LimitOptions{}, "next handler is nil"},
		{ok, nil, httplimit.IPKey(nil), httplimit.LimitOptions{}, "limiter is nil"},
		{ok, l, nil, httplimit.LimitOptions{}, "key function is nil"},
		{ok, l, httplimit.IPKey(nil), httplimit.LimitOptions{MaxDelay: -1}, "negative"},
	} {
		_, err := httplimit.Limit(tc.next, tc.l, tc.key, tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Limit: error %v, want one containing %q", err, tc.want)
		}
	}
}

// ExampleLimit: 2 requests per minute per client address, in process.
func ExampleLimit() {
	store := memory.New(memory.Options{})
	defer store.Close()
	limiter, err := sluice.NewLimiter(store, sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 2, Window: time.Minute})
	if err != nil {
		panic(err)
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello\n") })
	h, err := httplimit.Limit(hello, limiter, httplimit.IPKey(nil), httplimit.LimitOptions{Name: "per_ip"})
	if err != nil {
		panic(err)
	}
	for range 3 {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("Retry-After") != "")
	}
	// Output:
	// 200 "per_ip";q=2;w=60 false
	// 200 "per_ip";q=2;w=60 false
	// 429 "per_ip";q=2;w=60 true
}
