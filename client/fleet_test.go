package client_test

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"sort"
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

// fleet sends one request from each of n independent clients at once and
// returns the arrival times of their first retries.
func fleet(t *testing.T, n int, jitter float64) []time.Time {
	t.Helper()
	srv, a := limitedServer(t, "fleet")
	// The clients share a connection pool, opened beforehand, so the first
	// wave arrives together instead of spread by 100 TCP handshakes.
	pool := &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: n}
	t.Cleanup(pool.CloseIdleConnections)
	var warm sync.WaitGroup
	for range n {
		warm.Add(1)
		go func() {
			defer warm.Done()
			if resp, err := (&http.Client{Transport: pool}).Get(srv.URL); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	warm.Wait()
	a.mu.Lock()
	clear(a.at)
	clear(a.got)
	a.mu.Unlock()
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Transport: &client.Transport{Base: pool, MaxAttempts: 2, RetryAfterJitter: jitter}}
			req, _ := http.NewRequest("GET", srv.URL, nil)
			req.Header.Set("X-Client", fmt.Sprint(i))
			req.Header.Set("X-Limit", "1")
			<-start
			resp, err := c.Do(req)
			if err != nil {
				t.Errorf("client %d: %v", i, err)
				return
			}
			resp.Body.Close()
		}()
	}
	close(start)
	wg.Wait()
	var retries, firsts []time.Time
	for _, at := range a.at {
		firsts = append(firsts, at[0])
		if len(at) > 1 {
			retries = append(retries, at[1])
		}
	}
	sort.Slice(firsts, func(i, j int) bool { return firsts[i].Before(firsts[j]) })
	sort.Slice(retries, func(i, j int) bool { return retries[i].Before(retries[j]) })
	t.Logf("first wave spans %v, retries span %v", firsts[len(firsts)-1].Sub(firsts[0]), retries[len(retries)-1].Sub(retries[0]))
	if len(retries) < n/2 {
		t.Fatalf("only %d of %d clients retried; the limit should refuse most of the first wave", len(retries), n)
	}
	return retries
}

// spread returns the largest share of arrivals in any 100ms bin, and the
// coefficient of variation of the gaps between consecutive arrivals.
func spread(ts []time.Time) (maxShare, cv float64) {
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	bins := map[int64]int{}
	for _, t := range ts {
		bins[t.Sub(ts[0]).Milliseconds()/100]++
	}
	most := 0
	for _, c := range bins {
		most = max(most, c)
	}
	var gaps []float64
	for i := 1; i < len(ts); i++ {
		gaps = append(gaps, float64(ts[i].Sub(ts[i-1])))
	}
	var mean, sq float64
	for _, g := range gaps {
		mean += g
	}
	mean /= float64(len(gaps))
	for _, g := range gaps {
		sq += (g - mean) * (g - mean)
	}
	if mean > 0 {
		cv = math.Sqrt(sq/float64(len(gaps))) / mean
	}
	return float64(most) / float64(len(ts)), cv
}

// TestFleetRetriesSpreadOut: 100 clients refused together come back spread
// over time, not as one synchronized wave. The same fleet without the
// jitter is measured as a control, to show the measure can tell a wave.
func TestFleetRetriesSpreadOut(t *testing.T) {
	if testing.Short() {
		t.Skip("real-time fleet test")
	}
	retries := fleet(t, 100, 0) // the default jitter
	share, cv := spread(retries)
	t.Logf("jittered: %d retries, largest 100ms bin holds %.0f%%, gap CV %.2f", len(retries), share*100, cv)
	if share > 0.40 {
		t.Errorf("largest 100ms bin holds %.0f%% of %d retries, want ≤ 40%% (a wave)", share*100, len(retries))
	}

	control := fleet(t, 100, -1) // no jitter: every client waits exactly Retry-After
	cshare, ccv := spread(control)
	t.Logf("control without jitter: %d retries, largest bin %.0f%%, gap CV %.2f", len(control), cshare*100, ccv)
	// On a loaded machine a scheduling stall can smear even the control,
	// so it is compared with the jittered fleet rather than held to a
	// fixed bar.
	if cshare < share+0.25 {
		t.Errorf("control's largest bin %.0f%% is not clearly above the jittered %.0f%%; the measure does not tell a wave", cshare*100, share*100)
	}
}

// TestPacedBatchMeetsNo429: a pacing client working through a batch with a
// few workers reads RateLimit and never runs into the limit.
func TestPacedBatchMeetsNo429(t *testing.T) {
	if testing.Short() {
		t.Skip("real-time pacing test")
	}
	srv, a := limitedServer(t, "batch") // 10 per second, fixed window
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
	elapsed := time.Since(start)
	a.mu.Lock()
	defer a.mu.Unlock()
	t.Logf("%d requests in %v: %v", total, elapsed, a.got)
	if a.got[429] != 0 {
		t.Errorf("paced batch met %d 429s, want 0", a.got[429])
	}
	if a.got[200] != total {
		t.Errorf("%d requests succeeded, want %d", a.got[200], total)
	}
	// 30 at 10 per second cannot take less than two seconds of windows.
	if elapsed < 1900*time.Millisecond {
		t.Errorf("batch took %v; faster than the limit allows, so the test proves nothing", elapsed)
	}
}
