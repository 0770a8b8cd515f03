package client_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/client"
	"github.com/sluice-rl/sluice/httplimit"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/memory"
)

const fleetRules = `
domain: api
descriptors:
  - key: generic_key
    value: fleet
    descriptors:
      - key: x
        rate_limit: {name: shared, algorithm: token_bucket, unit: second, requests_per_unit: 20}
  - key: generic_key
    value: batch
    descriptors:
      - key: x
        rate_limit: {name: batch, unit: second, requests_per_unit: 10}
`

// arrivals records when each client's attempts reached the server.
type arrivals struct {
	mu  sync.Mutex
	at  map[string][]time.Time
	got map[int]int // status → count
}

// limitedServer runs the real middleware (in-process engine, memory store)
// in front of a handler that records arrivals; key picks the rule.
func limitedServer(t *testing.T, key string) (*httptest.Server, *arrivals) {
	t.Helper()
	snap, err := rules.Parse("api.yaml", []byte(fleetRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mem := memory.New(memory.Options{})
	t.Cleanup(func() { mem.Close() })
	engine, err := service.New(service.DefaultConfig(), service.StaticRules{Snapshot: snap}, mem, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := &arrivals{at: map[string][]time.Time{}, got: map[int]int{}}
	record := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})
	h, err := httplimit.New(record, httplimit.Config{
		Checker: engine,
		Domain:  "api",
		// Requests without X-Limit are not limited (used to open connections).
		Descriptors: [][]httplimit.KeyFunc{{httplimit.Static("generic_key", key), httplimit.Header("x", "X-Limit")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	// Arrivals are taken before the limiter, so refused attempts count too.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		a.mu.Lock()
		id := r.Header.Get("X-Client")
		a.at[id] = append(a.at[id], now)
		a.mu.Unlock()
		rec := &statusRecorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		a.mu.Lock()
		a.got[rec.code()]++
		a.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return srv, a
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(c int) { s.status = c; s.ResponseWriter.WriteHeader(c) }
func (s *statusRecorder) code() int {
	if s.status == 0 {
		return 200
	}
	return s.status
}

// retryWait is what one client of a fleet saw and did: the Retry-After
// of the refusal, and the wait the Transport computed before retrying.
type retryWait struct {
	retryAfter time.Duration
	wait       time.Duration
}

// raRecorder passes requests on and keeps the Retry-After of each answer.
type raRecorder struct {
	base http.RoundTripper
	mu   sync.Mutex
	ra   []string
}

func (r *raRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.base.RoundTrip(req)
	if err == nil {
		r.mu.Lock()
		r.ra = append(r.ra, resp.Header.Get("Retry-After"))
		r.mu.Unlock()
	}
	return resp, err
}

// fleet sends one request from each of n independent clients at once to the
// real limiting middleware and returns, for every client refused with a
// Retry-After, that Retry-After and the wait its Transport computed. The
// waits are captured through the sleep hook and not spent, so nothing here
// depends on the scheduler or the wall clock.
func fleet(t *testing.T, n int, jitter float64) []retryWait {
	t.Helper()
	srv, _ := limitedServer(t, "fleet")
	pool := &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: n}
	t.Cleanup(pool.CloseIdleConnections)
	start := make(chan struct{})
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		out []retryWait
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec := &raRecorder{base: pool}
			tr := &client.Transport{Base: rec, MaxAttempts: 2, RetryAfterJitter: jitter}
			var waits []time.Duration
			client.SetSleepHook(tr, func(ctx context.Context, d time.Duration) error {
				waits = append(waits, d) // one goroutine per Transport
				return ctx.Err()
			})
			req, _ := http.NewRequest("GET", srv.URL, nil)
			req.Header.Set("X-Client", fmt.Sprint(i))
			req.Header.Set("X-Limit", "1")
			<-start
			resp, err := (&http.Client{Transport: tr}).Do(req)
			if err != nil {
				t.Errorf("client %d: %v", i, err)
				return
			}
			resp.Body.Close()
			if len(waits) == 0 {
				return // admitted at once
			}
			if len(waits) != 1 || len(rec.ra) < 1 {
				t.Errorf("client %d: %d waits after %d answers, want 1 wait after a refusal", i, len(waits), len(rec.ra))
				return
			}
			secs, err := strconv.Atoi(rec.ra[0])
			if err != nil {
				t.Errorf("client %d: refusal's Retry-After %q is not delta-seconds: %v", i, rec.ra[0], err)
				return
			}
			mu.Lock()
			out = append(out, retryWait{retryAfter: time.Duration(secs) * time.Second, wait: waits[0]})
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	// A burst of 20: most of the 100 are refused, whatever the timing.
	if len(out) < n/2 {
		t.Fatalf("only %d of %d clients were refused and waited; the limit should refuse most of them", len(out), n)
	}
	return out
}

// largestBin returns the largest share of the waits in any 100ms bin.
func largestBin(ws []retryWait) float64 {
	bins := map[int64]int{}
	most := 0
	for _, w := range ws {
		b := w.wait.Milliseconds() / 100
		bins[b]++
		most = max(most, bins[b])
	}
	return float64(most) / float64(len(ws))
}

// TestFleetRetriesSpreadOut: 100 clients refused together plan their
// retries spread over the jitter range, not as one synchronized wave, and
// none plans to come back before the Retry-After it was given. The same
// fleet without jitter is the control: its retries all coincide, so the
// measure can tell a wave. The waits are those the Transport computes
// (captured, not slept), so the test does not depend on timing.
func TestFleetRetriesSpreadOut(t *testing.T) {
	tests := []struct {
		name   string
		jitter float64
		check  func(t *testing.T, share float64)
	}{
		{"default jitter", 0, func(t *testing.T, share float64) {
			if share > 0.40 {
				t.Errorf("largest 100ms bin holds %.0f%% of the retries, want ≤ 40%% (a wave)", share*100)
			}
		}},
		{"no jitter (control)", -1, func(t *testing.T, share float64) {
			if share < 0.90 {
				t.Errorf("largest 100ms bin holds %.0f%% of the retries, want ≥ 90%% (without jitter they coincide)", share*100)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ws := fleet(t, 100, tc.jitter)
			span := client.DefaultRetryAfterJitter
			for _, w := range ws {
				if w.wait < w.retryAfter {
					t.Errorf("wait %v is shorter than Retry-After %v", w.wait, w.retryAfter)
				}
				limit := w.retryAfter // no jitter: exactly Retry-After
				if tc.jitter >= 0 {
					limit += time.Duration(span * float64(max(w.retryAfter, client.DefaultBaseDelay)))
				} else if w.wait != w.retryAfter {
					t.Errorf("wait %v without jitter, want exactly Retry-After %v", w.wait, w.retryAfter)
				}
				if w.wait > limit {
					t.Errorf("wait %v beyond the jitter range, want ≤ %v", w.wait, limit)
				}
			}
			share := largestBin(ws)
			t.Logf("%d refused clients; largest 100ms bin of their waits holds %.0f%%", len(ws), share*100)
			tc.check(t, share)
		})
	}
}

// TestPacedBatchMeetsNo429: a pacing client working through a batch with a
// few workers reads RateLimit and never runs into the limit. A control
// first shows the limit is live: an unpaced client sending the same kind of
// request meets a 429 (counted, not timed: it sends until refused, with a
// generous cap), so the paced run's zero 429s are earned by the pacing.
func TestPacedBatchMeetsNo429(t *testing.T) {
	if testing.Short() {
		t.Skip("real-time pacing test")
	}
	srv, a := limitedServer(t, "batch") // 10 per second, fixed window
	unpaced := &http.Client{Transport: &client.Transport{MaxAttempts: 1}}
	refused := false
	for i := 0; i < 10000 && !refused; i++ {
		req, _ := http.NewRequest("GET", srv.URL, nil)
		req.Header.Set("X-Limit", "control") // its own counter
		resp, err := unpaced.Do(req)
		if err != nil {
			t.Fatalf("control request: %v", err)
		}
		resp.Body.Close()
		refused = resp.StatusCode == http.StatusTooManyRequests
	}
	if !refused {
		t.Fatal("an unpaced client was never refused in 10000 requests; the limit is not live, so the test proves nothing")
	}
	a.mu.Lock()
	clear(a.got)
	a.mu.Unlock()

	tr := &client.Transport{Pacing: true, MaxAttempts: 1}
	c := &http.Client{Transport: tr}
	const total, workers = 30, 3
	jobs := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				req, _ := http.NewRequest("GET", srv.URL, nil)
				req.Header.Set("X-Limit", "1")
				resp, err := c.Do(req)
				if err != nil {
					t.Errorf("request: %v", err)
					continue
				}
				resp.Body.Close()
			}
		}()
	}
	for i := range total {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	a.mu.Lock()
	defer a.mu.Unlock()
	t.Logf("%d requests in %v (logged, not asserted): %v", total, time.Since(start), a.got)
	if a.got[429] != 0 {
		t.Errorf("paced batch met %d 429s, want 0", a.got[429])
	}
	if a.got[200] != total {
		t.Errorf("%d requests succeeded, want %d", a.got[200], total)
	}
}
