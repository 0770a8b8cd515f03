package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/headers"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/storetest"
)

func TestFieldsOnEveryResponse(t *testing.T) {
	clock := storetest.NewClock() // at a minute boundary: fixed windows reset in 60s
	next := &okHandler{}
	h := mustNew(t, next, Config{
		Checker: newEngine(t, clock, nil),
		Domain:  "web",
		Descriptors: [][]KeyFunc{
			{ClientIP("remote_address", nil)},
			{Header("api_key", "X-API-Key")},
		},
	})
	steps := []struct {
		name        string
		remote      string
		hdr         []string
		advance     time.Duration
		wantCode    int
		wantLimit   string
		wantPolicy  string
		wantRetry   string
		wantHandler int // cumulative calls of the wrapped handler
	}{
		{"first", "198.51.100.1:1234", nil, 0, 200, `"per_ip";r=2;t=60`, `"per_ip";q=3;w=60`, "", 1},
		{"second, 10s later", "198.51.100.1:1234", nil, 10 * time.Second, 200, `"per_ip";r=1;t=50`, `"per_ip";q=3;w=60`, "", 2},
		{"two policies", "198.51.100.1:1234", []string{"X-API-Key", "k1"}, 0, 200,
			`"per_ip";r=0;t=50, "per_key";r=4;t=1`, `"per_ip";q=3;w=60, "per_key";q=5;w=1`, "", 3},
		{"over the ip limit", "198.51.100.1:1234", []string{"X-API-Key", "k1"}, 0, 429,
			`"per_ip";r=0;t=50, "per_key";r=4;t=1`, `"per_ip";q=3;w=60, "per_key";q=5;w=1`, "50", 3},
		{"another ip", "198.51.100.2:1", nil, 0, 200, `"per_ip";r=2;t=50`, `"per_ip";q=3;w=60`, "", 4},
		{"unlimited ip: no fields", "192.0.2.99:1", nil, 0, 200, "", "", "", 5},
		{"quota 0: 429 without Retry-After", "192.0.2.99:1", []string{"X-API-Key", "blocked"}, 0, 429,
			`"blocked";r=0;t=0`, `"blocked";q=0;w=1`, "", 5},
		{"window over", "198.51.100.1:1234", nil, 50 * time.Second, 200, `"per_ip";r=2;t=60`, `"per_ip";q=3;w=60`, "", 6},
	}
	for i, s := range steps {
		clock.Advance(s.advance)
		w := do(h, s.remote, s.hdr...)
		if w.Code != s.wantCode {
			t.Errorf("step %d (%s): status %d, want %d", i, s.name, w.Code, s.wantCode)
		}
		if got := fieldOf(w, "RateLimit"); got != s.wantLimit {
			t.Errorf("step %d (%s): RateLimit = %q, want %q", i, s.name, got, s.wantLimit)
		}
		if got := fieldOf(w, "RateLimit-Policy"); got != s.wantPolicy {
			t.Errorf("step %d (%s): RateLimit-Policy = %q, want %q", i, s.name, got, s.wantPolicy)
		}
		if got := fieldOf(w, "Retry-After"); got != s.wantRetry {
			t.Errorf("step %d (%s): Retry-After = %q, want %q", i, s.name, got, s.wantRetry)
		}
		if next.calls != s.wantHandler {
			t.Errorf("step %d (%s): handler called %d times, want %d", i, s.name, next.calls, s.wantHandler)
		}
	}
}

func TestTooManyRequestsBody(t *testing.T) {
	clock := storetest.NewClock()
	h := mustNew(t, &okHandler{}, Config{
		Checker:     newEngine(t, clock, nil),
		Domain:      "web",
		Descriptors: [][]KeyFunc{{ClientIP("remote_address", nil)}},
		Legacy:      true,
		Now:         clock.Now,
	})
	var w *httptest.ResponseRecorder
	for range 4 {
		w = do(h, "198.51.100.7:9")
	}
	if w.Code != 429 {
		t.Fatalf("4th request: status %d, want 429", w.Code)
	}
	for k, want := range map[string]string{
		"Content-Type":          "application/problem+json",
		"Cache-Control":         "no-store",
		"Retry-After":           "60",
		"X-Ratelimit-Limit":     "3",
		"X-Ratelimit-Remaining": "0",
		"X-Ratelimit-Used":      "3",
		"X-Ratelimit-Reset":     strconv.FormatInt(storetest.Epoch.Unix()+60, 10),
	} {
		if got := w.Header().Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	p, err := headers.ParseProblem(w.Body.Bytes())
	if err != nil {
		t.Fatalf("body %q: %v", w.Body.String(), err)
	}
	want := headers.Problem{Type: headers.QuotaExceededType, Title: p.Title, Status: 429, ViolatedPolicies: []string{"per_ip"}, Reason: headers.ReasonLimited}
	if !reflect.DeepEqual(p, want) || p.Title == "" {
		t.Errorf("problem = %+v, want %+v with a title", p, want)
	}
}

func TestHandlerStatusKeepsFields(t *testing.T) {
	h := mustNew(t, http.NotFoundHandler(), Config{
		Checker:     newEngine(t, storetest.NewClock(), nil),
		Domain:      "web",
		Descriptors: [][]KeyFunc{{ClientIP("remote_address", nil)}},
	})
	w := do(h, "198.51.100.1:1")
	if w.Code != 404 || fieldOf(w, "RateLimit") != `"per_ip";r=2;t=60` {
		t.Errorf("404 from the handler: status %d RateLimit %q; want 404 with the field", w.Code, fieldOf(w, "RateLimit"))
	}
}

func TestShadowModeIsInvisible(t *testing.T) {
	next := &okHandler{}
	h := mustNew(t, next, Config{
		Checker:     newEngine(t, storetest.NewClock(), nil),
		Domain:      "web",
		Descriptors: [][]KeyFunc{{Static("shadow", "x")}},
	})
	for i := range 3 {
		w := do(h, "198.51.100.1:1")
		if w.Code != 200 || fieldOf(w, "RateLimit") != "" {
			t.Errorf("request %d under a shadow rule: status %d RateLimit %q; want 200 and no field", i, w.Code, fieldOf(w, "RateLimit"))
		}
	}
	if next.calls != 3 {
		t.Errorf("handler called %d times, want 3", next.calls)
	}
}

func TestFailures(t *testing.T) {
	tests := []struct {
		name     string
		cfg      Config
		desc     []KeyFunc
		wantCode int
		wantErr  bool
	}{
		{"checker down, fail open", Config{Checker: failingChecker{}}, []KeyFunc{Static("k", "v")}, 200, true},
		{"checker down, fail closed", Config{Checker: failingChecker{}, FailClosed: true}, []KeyFunc{Static("k", "v")}, 503, true},
		{"store down, rule fails closed", Config{}, []KeyFunc{Static("closed", "x")}, 503, false},
		{"store down, rule fails open", Config{}, []KeyFunc{ClientIP("remote_address", nil)}, 200, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			if cfg.Checker == nil {
				cfg.Checker = newEngine(t, storetest.NewClock(), downStore{})
			}
			cfg.Domain = "web"
			cfg.Descriptors = [][]KeyFunc{tt.desc}
			var reported atomic.Int32
			cfg.OnError = func(*http.Request, error) { reported.Add(1) }
			h := mustNew(t, &okHandler{}, cfg)
			w := do(h, "198.51.100.1:1")
			if w.Code != tt.wantCode {
				t.Errorf("status %d, want %d (body %s)", w.Code, tt.wantCode, w.Body.String())
			}
			if got := reported.Load() > 0; got != tt.wantErr {
				t.Errorf("OnError called: %v, want %v", got, tt.wantErr)
			}
			if w.Code == 503 {
				if p, err := headers.ParseProblem(w.Body.Bytes()); err != nil || p.Status != 503 || w.Header().Get("Retry-After") != "1" {
					t.Errorf("503: problem %+v (%v), Retry-After %q; want status 503 and Retry-After 1", p, err, w.Header().Get("Retry-After"))
				}
			}
		})
	}
}

func TestNewValidates(t *testing.T) {
	mem := memory.New(memory.Options{})
	defer mem.Close()
	rate, _ := sluice.NewLimiter(mem, sluice.Limit{Algorithm: sluice.GCRA, Quota: 1, Window: time.Second})
	tests := []struct {
		name string
		next http.Handler
		cfg  Config
	}{
		{"nil handler", nil, Config{Checker: failingChecker{}, Domain: "d"}},
		{"no checker", http.NotFoundHandler(), Config{Domain: "d"}},
		{"no domain", http.NotFoundHandler(), Config{Checker: failingChecker{}}},
		{"empty descriptor", http.NotFoundHandler(), Config{Checker: failingChecker{}, Domain: "d", Descriptors: [][]KeyFunc{{}}}},
		{"nil key", http.NotFoundHandler(), Config{Checker: failingChecker{}, Domain: "d", Descriptors: [][]KeyFunc{{nil}}}},
		{"not a concurrency limit", http.NotFoundHandler(), Config{Checker: failingChecker{}, Domain: "d", Concurrency: []Concurrency{{Name: "c", Limiter: rate}}}},
		{"negative delay", http.NotFoundHandler(), Config{Checker: failingChecker{}, Domain: "d", MaxDelay: -1}},
	}
	for _, tt := range tests {
		if h, err := New(tt.next, tt.cfg); err == nil || h != nil {
			t.Errorf("%s: New = %v, %v; want an error", tt.name, h, err)
		}
	}
}

const concurrencyRules = `
domain: web
descriptors:
  - key: inflight
    rate_limit: {name: inflight, algorithm: concurrency, requests_per_unit: 1, window: 1m}
`

// concurrencyServer runs the middleware with a concurrency limit of 1 in a
// real server; the handler does what the "do" query parameter says. The
// limit is Config.Concurrency's, or with fromRules a rule-file limit that
// the engine applies and the middleware releases.
func concurrencyServer(t *testing.T, shed, fromRules bool) (*httptest.Server, chan struct{}, chan struct{}) {
	t.Helper()
	mem := memory.New(memory.Options{})
	t.Cleanup(func() { mem.Close() })
	lim, err := sluice.NewLimiter(mem, sluice.Limit{Algorithm: sluice.Concurrency, Quota: 1, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Checker:     failingChecker{}, // no rate limits here, only concurrency
		Domain:      "web",
		Concurrency: []Concurrency{{Name: "inflight", Limiter: lim, Shed: shed}},
	}
	if fromRules {
		snap, err := rules.Parse("web.yaml", []byte(concurrencyRules), rules.Options{})
		if err != nil {
			t.Fatal(err)
		}
		eng, err := service.New(service.DefaultConfig(), service.StaticRules{Snapshot: snap}, mem, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Checker, cfg.Concurrency = eng, nil
		cfg.Descriptors = [][]KeyFunc{{Static("inflight", "all")}}
		cfg.OnError = func(_ *http.Request, err error) { t.Errorf("OnError: %v", err) }
	}
	entered, unblock := make(chan struct{}, 10), make(chan struct{})
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		switch r.URL.Query().Get("do") {
		case "block":
			<-unblock
		case "panic":
			panic(http.ErrAbortHandler) // net/http recovers it quietly
		case "wait-for-client":
			<-r.Context().Done()
		}
	})
	h := mustNew(t, next, cfg)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, entered, unblock
}

func getStatus(t *testing.T, url string) (int, http.Header) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, nil
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

// waitFree polls until a request is admitted again (the release happens after
// the response, so the next request may race it by a moment).
func waitFree(t *testing.T, url, why string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		code, _ := getStatus(t, url)
		if code == 200 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: slot not released: status %d", why, code)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestConcurrency(t *testing.T) {
	for _, shed := range []bool{false, true} {
		t.Run("shed="+strconv.FormatBool(shed), func(t *testing.T) {
			srv, entered, unblock := concurrencyServer(t, shed, false)
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { defer wg.Done(); getStatus(t, srv.URL+"?do=block") }()
			<-entered
			code, h := getStatus(t, srv.URL)
			want := 429
			if shed {
				want = 503
			}
			if code != want {
				t.Errorf("second request while one is in flight: status %d, want %d", code, want)
			}
			if got := h.Get("RateLimit"); got != `"inflight";r=0` {
				t.Errorf("RateLimit = %q, want %q", got, `"inflight";r=0`)
			}
			if got := h.Get("RateLimit-Policy"); got != `"inflight";q=1;qu="concurrent-requests"` {
				t.Errorf("RateLimit-Policy = %q", got)
			}
			close(unblock)
			wg.Wait()
			drain(entered)
			waitFree(t, srv.URL, "after the handler returned")
		})
	}
}

func drain(c chan struct{}) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

// TestRuleConcurrency: a rule-file concurrency limit holds its lease while
// the handler runs and gives it back when it returns.
func TestRuleConcurrency(t *testing.T) {
	srv, entered, unblock := concurrencyServer(t, false, true)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); getStatus(t, srv.URL+"?do=block") }()
	<-entered
	code, h := getStatus(t, srv.URL)
	if code != 429 {
		t.Errorf("second request while one is in flight: status %d, want 429", code)
	}
	if got := h.Get("RateLimit-Policy"); got != `"inflight";q=1;qu="concurrent-requests"` {
		t.Errorf("RateLimit-Policy = %q", got)
	}
	close(unblock)
	wg.Wait()
	drain(entered)
	waitFree(t, srv.URL, "after the handler returned")
	// Every request since gave its lease back: the slot is free at once.
	drain(entered)
	for i := range 3 {
		if code, _ := getStatus(t, srv.URL); code != 200 {
			t.Fatalf("request %d after release: status %d, want 200", i, code)
		}
	}
}

func TestConcurrencyReleasedOnPanicAndDisconnect(t *testing.T) {
	for _, fromRules := range []bool{false, true} {
		t.Run("rules="+strconv.FormatBool(fromRules), func(t *testing.T) {
			testReleasedOnPanicAndDisconnect(t, fromRules)
		})
	}
}

func testReleasedOnPanicAndDisconnect(t *testing.T, fromRules bool) {
	srv, entered, _ := concurrencyServer(t, false, fromRules)

	if code, _ := getStatus(t, srv.URL+"?do=panic"); code != 0 {
		t.Errorf("panicking handler: status %d, want a dropped connection", code)
	}
	drain(entered)
	waitFree(t, srv.URL, "after a panic")
	drain(entered)

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"?do=wait-for-client", nil)
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	<-entered
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("client error = %v, want context.Canceled", err)
	}
	waitFree(t, srv.URL, "after the client went away")
}

func TestLeakyBucketShaping(t *testing.T) {
	clock := storetest.NewClock()
	var mu sync.Mutex
	var arrived []time.Time
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrived = append(arrived, time.Now())
		mu.Unlock()
	})
	cfg := Config{
		Checker:     newEngine(t, clock, nil),
		Domain:      "web",
		Descriptors: [][]KeyFunc{{Static("queue", "q")}},
	}
	h := mustNew(t, next, cfg)
	// 10 per second: the store clock stands still, so request n is admitted
	// with a Delay of n × 100ms.
	start := time.Now()
	for i := range 3 {
		if w := do(h, "198.51.100.1:1"); w.Code != 200 {
			t.Fatalf("request %d: status %d", i, w.Code)
		}
	}
	for i, at := range arrived {
		if got, want := at.Sub(start), time.Duration(i)*100*time.Millisecond; got < want {
			t.Errorf("request %d reached the handler after %v, want ≥ %v", i, got, want)
		}
	}

	// A client that leaves while queued is dropped before the handler.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	r := httptest.NewRequest("GET", "/", nil).WithContext(ctx)
	n := len(arrived)
	h.ServeHTTP(httptest.NewRecorder(), r)
	if len(arrived) != n {
		t.Errorf("a request whose client left during its delay reached the handler")
	}

	// A delay beyond MaxDelay is refused with 503 rather than queued.
	cfg.MaxDelay = 50 * time.Millisecond
	h2 := mustNew(t, next, cfg)
	if w := do(h2, "198.51.100.1:1"); w.Code != 503 || w.Header().Get("Retry-After") == "" {
		t.Errorf("delay over MaxDelay: status %d Retry-After %q; want 503 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
}

func TestCostAndTwoRefusals(t *testing.T) {
	clock := storetest.NewClock()
	h := mustNew(t, &okHandler{}, Config{
		Checker:     newEngine(t, clock, nil),
		Domain:      "web",
		Descriptors: [][]KeyFunc{{ClientIP("remote_address", nil)}, {Header("api_key", "X-API-Key")}},
		Cost:        func(r *http.Request) uint64 { return 3 },
	})
	// per_ip allows 3 a minute and per_key holds 5: a cost of 3 empties
	// per_ip at once, and the next request is refused by both policies.
	w := do(h, "198.51.100.1:1", "X-API-Key", "k")
	if w.Code != 200 || fieldOf(w, "RateLimit") != `"per_ip";r=0;t=60, "per_key";r=2;t=1` {
		t.Fatalf("cost 3: status %d RateLimit %q", w.Code, fieldOf(w, "RateLimit"))
	}
	w = do(h, "198.51.100.1:1", "X-API-Key", "k")
	if w.Code != 429 {
		t.Fatalf("second request: status %d, want 429", w.Code)
	}
	p, err := headers.ParseProblem(w.Body.Bytes())
	if err != nil || !reflect.DeepEqual(p.ViolatedPolicies, []string{"per_ip", "per_key"}) {
		t.Errorf("problem %+v (%v), want both policies violated", p, err)
	}
	// Retry-After is the later of the two waits: per_ip's window end.
	if got := w.Header().Get("Retry-After"); got != "60" {
		t.Errorf("Retry-After = %q, want 60", got)
	}
}

// TestConcurrencyShedChargesNothing: the edge decides all or nothing. A request the
// concurrency limit sheds with 503 charges no rate limit, and a request a
// rate limit refuses gives its concurrency slot back.
func TestConcurrencyShedChargesNothing(t *testing.T) {
	clock := storetest.NewClock()
	mem := memory.New(memory.Options{Now: clock.Now})
	t.Cleanup(func() { mem.Close() })
	lim, err := sluice.NewLimiter(mem, sluice.Limit{Algorithm: sluice.Concurrency, Quota: 1, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	release, res, err := lim.Acquire(context.Background(), "httplimit:inflight:")
	if err != nil || !res.Allowed {
		t.Fatalf("holding the only slot: %+v, %v", res, err)
	}
	h := mustNew(t, &okHandler{}, Config{
		Checker:     newEngine(t, clock, nil),
		Domain:      "web",
		Descriptors: [][]KeyFunc{{ClientIP("remote_address", nil)}},
		Concurrency: []Concurrency{{Name: "inflight", Limiter: lim, Shed: true}},
	})
	for i := range 5 {
		if w := do(h, "198.51.100.1:1"); w.Code != 503 {
			t.Fatalf("shed request %d: status %d, want 503", i, w.Code)
		}
	}
	if err := release(context.Background()); err != nil {
		t.Fatal(err)
	}
	// per_ip allows 3 a minute: all three are still there.
	for i := range 3 {
		w := do(h, "198.51.100.1:1")
		if w.Code != 200 {
			t.Fatalf("request %d after the shed ones: status %d, want 200 (shedding charged the rate limit)", i, w.Code)
		}
		if want := fmt.Sprintf(`"per_ip";r=%d;t=60`, 2-i); !strings.Contains(fieldOf(w, "RateLimit"), want) {
			t.Errorf("request %d: RateLimit %q, want it to contain %q", i, fieldOf(w, "RateLimit"), want)
		}
	}
	// The 4th is refused by per_ip, and must not keep the slot it took.
	if w := do(h, "198.51.100.1:1"); w.Code != 429 {
		t.Fatalf("4th request: status %d, want 429", w.Code)
	}
	_, res, err = lim.Acquire(context.Background(), "httplimit:inflight:")
	if err != nil || !res.Allowed {
		t.Errorf("slot after a 429: %+v, %v; want it free (the refused request gave it back)", res, err)
	}
}

// TestInvalidKeyRefused: a key the engine refuses as invalid (not UTF-8, or
// over its limits) is answered 400 naming the field, fail-closed or not:
// passed through, any client could skip every limit with such a header.
// Distinct invalid values never reach a counter, so they cannot share one.
func TestInvalidKeyRefused(t *testing.T) {
	for _, failClosed := range []bool{false, true} {
		next := &okHandler{}
		var reported atomic.Int32
		h := mustNew(t, next, Config{
			Checker:     newEngine(t, storetest.NewClock(), nil),
			Domain:      "web",
			Descriptors: [][]KeyFunc{{Header("api_key", "X-Api-Key")}},
			FailClosed:  failClosed,
			OnError:     func(*http.Request, error) { reported.Add(1) },
		})
		for _, tc := range []struct {
			name, value, detail string
			want                int
		}{
			{"not UTF-8", "k\xff", "descriptors[0].entries[0].value: not valid UTF-8", 400},
			{"other bytes not UTF-8", "k\xfe", "descriptors[0].entries[0].value: not valid UTF-8", 400},
			{"lone surrogate", "\xed\xa0\x80", "descriptors[0].entries[0].value: not valid UTF-8", 400},
			{"over max-value-bytes", strings.Repeat("k", service.DefaultMaxValueBytes+1),
				"descriptors[0].entries[0].value: 4097 bytes exceeds the limit max-value-bytes=4096", 400},
			{"valid", "ünïcode", "", 200},
		} {
			w := do(h, "198.51.100.1:1", "X-Api-Key", tc.value)
			if w.Code != tc.want {
				t.Errorf("fail closed %v, %s: status %d, want %d (body %s)", failClosed, tc.name, w.Code, tc.want, w.Body.String())
				continue
			}
			if tc.want != 400 {
				continue
			}
			p, err := headers.ParseProblem(w.Body.Bytes())
			if want := "the request cannot be rate limited: " + tc.detail; err != nil || p.Status != 400 || p.Detail != want {
				t.Errorf("fail closed %v, %s: problem %+v (%v), want status 400 and detail %q", failClosed, tc.name, p, err, want)
			}
		}
		if next.calls != 1 {
			t.Errorf("fail closed %v: handler called %d times, want 1 (the valid request only)", failClosed, next.calls)
		}
		if n := reported.Load(); n != 0 {
			t.Errorf("fail closed %v: OnError called %d times, want 0 (the client's doing)", failClosed, n)
		}
	}
}
