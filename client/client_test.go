package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/store/storetest"
)

// reply is one scripted response.
type reply struct {
	status int
	header map[string]string
}

// script is a test server answering with its replies in order (the last one
// repeats) and recording what it received.
type script struct {
	mu      sync.Mutex
	replies []reply
	bodies  []string
	methods []string
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	n := len(s.bodies)
	s.bodies = append(s.bodies, string(body))
	s.methods = append(s.methods, r.Method)
	rep := s.replies[min(n, len(s.replies)-1)]
	s.mu.Unlock()
	for k, v := range rep.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(rep.status)
	_, _ = io.WriteString(w, "attempt body")
}

func (s *script) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.bodies)
}

// fakeTime gives a Transport a fake clock whose sleeps advance it, and
// records the sleeps.
type fakeTime struct {
	clock  *storetest.Clock
	mu     sync.Mutex
	sleeps []time.Duration
}

func newFakeTime(t *Transport, r float64) *fakeTime {
	f := &fakeTime{clock: storetest.NewClock()}
	t.now = f.clock.Now
	t.sleep = func(ctx context.Context, d time.Duration) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		f.mu.Lock()
		f.sleeps = append(f.sleeps, d)
		f.mu.Unlock()
		f.clock.Advance(d)
		return nil
	}
	t.rand = func() float64 { return r }
	return f
}

func (f *fakeTime) slept() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.sleeps...)
}

func TestRetryWaits(t *testing.T) {
	ok := reply{status: 200}
	tests := []struct {
		name      string
		tr        *Transport
		rand      float64
		replies   []reply
		wantSleep []time.Duration
		wantCode  int
		wantCalls int
	}{
		{
			name:      "retry-after takes precedence, with jitter",
			rand:      0.5,
			replies:   []reply{{429, map[string]string{"Retry-After": "3"}}, ok},
			wantSleep: []time.Duration{3*time.Second + 750*time.Millisecond}, // 3s + 0.5 × 0.5 × 3s
			wantCode:  200, wantCalls: 2,
		},
		{
			name:      "retry-after without jitter is exact",
			tr:        &Transport{RetryAfterJitter: -1},
			rand:      0.9,
			replies:   []reply{{503, map[string]string{"Retry-After": "2"}}, ok},
			wantSleep: []time.Duration{2 * time.Second},
			wantCode:  200, wantCalls: 2,
		},
		{
			name:      "retry-after as an HTTP date",
			tr:        &Transport{RetryAfterJitter: -1},
			replies:   []reply{{429, map[string]string{"Retry-After": "Thu, 01 Jan 2026 00:00:05 GMT"}}, ok},
			wantSleep: []time.Duration{5 * time.Second},
			wantCode:  200, wantCalls: 2,
		},
		{
			name:      "full jitter backoff doubles its ceiling",
			tr:        &Transport{BaseDelay: time.Second, MaxDelay: 3 * time.Second, MaxAttempts: 5},
			rand:      0.5,
			replies:   []reply{{503, nil}},
			wantSleep: []time.Duration{500 * time.Millisecond, time.Second, 1500 * time.Millisecond, 1500 * time.Millisecond},
			wantCode:  503, wantCalls: 5,
		},
		{
			name:      "malformed retry-after falls back to backoff",
			tr:        &Transport{BaseDelay: time.Second},
			rand:      0.25,
			replies:   []reply{{429, map[string]string{"Retry-After": "soon"}}, ok},
			wantSleep: []time.Duration{250 * time.Millisecond},
			wantCode:  200, wantCalls: 2,
		},
		{
			name:      "retry-after beyond MaxRetryAfter is returned",
			tr:        &Transport{MaxRetryAfter: 10 * time.Second},
			replies:   []reply{{429, map[string]string{"Retry-After": "11"}}, ok},
			wantSleep: nil,
			wantCode:  429, wantCalls: 1,
		},
		{
			name:      "bounded attempts",
			tr:        &Transport{MaxAttempts: 3, RetryAfterJitter: -1},
			replies:   []reply{{429, map[string]string{"Retry-After": "1"}}},
			wantSleep: []time.Duration{time.Second, time.Second},
			wantCode:  429, wantCalls: 3,
		},
		{
			name:      "other errors are not retried",
			replies:   []reply{{500, nil}, ok},
			wantSleep: nil,
			wantCode:  500, wantCalls: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &script{replies: tt.replies}
			srv := httptest.NewServer(s)
			defer srv.Close()
			tr := tt.tr
			if tr == nil {
				tr = &Transport{}
			}
			ft := newFakeTime(tr, tt.rand)
			resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantCode {
				t.Errorf("status = %d, want %d", resp.StatusCode, tt.wantCode)
			}
			if string(body) != "attempt body" {
				t.Errorf("body = %q, want the last attempt's body", body)
			}
			if got := s.count(); got != tt.wantCalls {
				t.Errorf("server saw %d requests, want %d", got, tt.wantCalls)
			}
			if got := ft.slept(); !equalDurations(got, tt.wantSleep) {
				t.Errorf("slept %v, want %v", got, tt.wantSleep)
			}
		})
	}
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestRetryOnlyIdempotent(t *testing.T) {
	limited := []reply{{429, map[string]string{"Retry-After": "1"}}, {200, nil}}
	tests := []struct {
		name      string
		tr        *Transport
		method    string
		body      func() io.Reader
		header    string
		wantCalls int
		wantCode  int
	}{
		{"GET retried", &Transport{}, "GET", nil, "", 2, 200},
		{"PUT with body retried", &Transport{}, "PUT", func() io.Reader { return strings.NewReader("payload") }, "", 2, 200},
		{"POST not retried", &Transport{}, "POST", func() io.Reader { return strings.NewReader("payload") }, "", 1, 429},
		{"POST with Idempotency-Key retried", &Transport{}, "POST", func() io.Reader { return strings.NewReader("payload") }, "Idempotency-Key", 2, 200},
		{"POST retried when told", &Transport{RetryNonIdempotent: true}, "POST", func() io.Reader { return strings.NewReader("payload") }, "", 2, 200},
		{"body without GetBody not retried", &Transport{RetryNonIdempotent: true}, "PUT", func() io.Reader { return io.MultiReader(strings.NewReader("payload")) }, "", 1, 429},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &script{replies: limited}
			srv := httptest.NewServer(s)
			defer srv.Close()
			tr := tt.tr
			newFakeTime(tr, 0)
			var body io.Reader
			if tt.body != nil {
				body = tt.body()
			}
			req, err := http.NewRequest(tt.method, srv.URL, body)
			if err != nil {
				t.Fatal(err)
			}
			if tt.header != "" {
				req.Header.Set(tt.header, "k-1")
			}
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatalf("RoundTrip: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.wantCode || s.count() != tt.wantCalls {
				t.Errorf("status %d after %d calls, want %d after %d", resp.StatusCode, s.count(), tt.wantCode, tt.wantCalls)
			}
			if tt.body != nil {
				for i, b := range s.bodies {
					if b != "payload" {
						t.Errorf("attempt %d sent body %q, want %q (rewound)", i+1, b, "payload")
					}
				}
			}
		})
	}
}

// TestContext: a caller's context wins over a Retry-After wait. The server
// asks for an hour and the Transport would wait it out (MaxRetryAfter 2h),
// so a return at all (within the minute the tests allow) proves the wait
// was cut short; no wall-clock bound is asserted.
func TestContext(t *testing.T) {
	newServer := func(t *testing.T) (*httptest.Server, *script) {
		s := &script{replies: []reply{{429, map[string]string{"Retry-After": "3600"}}, {200, nil}}}
		srv := httptest.NewServer(s)
		t.Cleanup(srv.Close)
		return srv, s
	}
	roundTrip := func(t *testing.T, tr *Transport, req *http.Request) (*http.Response, error) {
		t.Helper()
		type result struct {
			resp *http.Response
			err  error
		}
		done := make(chan result, 1)
		go func() {
			resp, err := tr.RoundTrip(req)
			done <- result{resp, err}
		}()
		select {
		case r := <-done:
			return r.resp, r.err
		case <-time.After(time.Minute):
			t.Fatal("RoundTrip has not returned after a minute: it is waiting out the Retry-After")
			return nil, nil
		}
	}
	t.Run("cancel during the wait", func(t *testing.T) {
		srv, s := newServer(t)
		tr := &Transport{MaxRetryAfter: 2 * time.Hour}
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
		go func() { // once the 429 is out: the Transport is (about to be) waiting
			for s.count() == 0 {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(50 * time.Millisecond)
			cancel()
		}()
		resp, err := roundTrip(t, tr, req)
		if err == nil {
			resp.Body.Close()
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("RoundTrip error = %v, want context.Canceled", err)
		}
		if s.count() != 1 {
			t.Errorf("server saw %d requests, want 1 (no retry after the cancel)", s.count())
		}
	})
	t.Run("deadline before the retry returns the 429", func(t *testing.T) {
		srv, s := newServer(t)
		tr := &Transport{MaxRetryAfter: 2 * time.Hour}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
		resp, err := roundTrip(t, tr, req)
		if err != nil {
			t.Fatalf("RoundTrip: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != 429 || s.count() != 1 {
			t.Errorf("status = %d after %d requests, want 429 after 1 (the deadline could not be met: no wait)", resp.StatusCode, s.count())
		}
	})
}
