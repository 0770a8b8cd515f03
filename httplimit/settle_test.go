package httplimit

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/storetest"
)

// remaining reads what one descriptor's limit has left, without charging.
func remaining(t *testing.T, e *service.Engine, entries ...rules.Entry) int64 {
	t.Helper()
	resp, err := e.Check(context.Background(), service.Request{Domain: "web", Descriptors: []service.Descriptor{{Entries: entries, Hits: new(uint64)}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Statuses[0].Result.Remaining
}

func ip(v string) rules.Entry { return rules.Entry{Key: "remote_address", Value: v} }

func TestSettleCost(t *testing.T) {
	for _, tc := range []struct {
		name      string
		estimate  uint64 // Config.Cost
		handler   http.HandlerFunc
		actual    func(*http.Request, Written) (uint64, bool) // Config.ActualCost
		reports   bool
		remaining int64 // of per_ip (3 a minute) after one request
	}{
		{"the handler reports more than the estimate: charged", 1,
			func(w http.ResponseWriter, r *http.Request) { ReportCost(r, 3) }, nil, true, 0},
		{"the handler reports less: refunded", 3,
			func(w http.ResponseWriter, r *http.Request) { ReportCost(r, 1) }, nil, true, 2},
		{"reports nothing: the estimate stands", 2,
			func(w http.ResponseWriter, r *http.Request) {}, nil, true, 1},
		{"the last report wins", 1,
			func(w http.ResponseWriter, r *http.Request) { ReportCost(r, 3); ReportCost(r, 2) }, nil, true, 1},
		{"computed from the response: failures are free", 1,
			func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNotFound) },
			func(_ *http.Request, w Written) (uint64, bool) {
				return map[bool]uint64{true: 0, false: 1}[w.Status >= 400], true
			}, false, 3},
		{"computed from the bytes written", 1,
			func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "hello") },
			func(_ *http.Request, w Written) (uint64, bool) { return uint64(w.Bytes) / 2, w.Status == 200 }, false, 1},
		{"not computed: the estimate stands", 2,
			func(w http.ResponseWriter, r *http.Request) {},
			func(*http.Request, Written) (uint64, bool) { return 0, false }, false, 1},
		{"a report wins over the computed cost", 1,
			func(w http.ResponseWriter, r *http.Request) { ReportCost(r, 2) },
			func(*http.Request, Written) (uint64, bool) { return 3, true }, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, storetest.NewClock(), nil)
			var errs []error
			h := mustNew(t, tc.handler, Config{
				Checker: e, Domain: "web", Descriptors: [][]KeyFunc{{ClientIP("remote_address", nil)}},
				Cost:       func(*http.Request) uint64 { return tc.estimate },
				ActualCost: tc.actual, CostReports: tc.reports,
				OnError: func(_ *http.Request, err error) { errs = append(errs, err) },
			})
			do(h, "198.51.100.7:1")
			if got := remaining(t, e, ip("198.51.100.7")); got != tc.remaining {
				t.Errorf("per_ip remaining after the request: %d, want %d", got, tc.remaining)
			}
			if len(errs) > 0 {
				t.Errorf("OnError: %v", errs)
			}
		})
	}
}

func TestSettleThenRefuse(t *testing.T) {
	e := newEngine(t, storetest.NewClock(), nil)
	h := mustNew(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ReportCost(r, 3) }), Config{
		Checker: e, Domain: "web", Descriptors: [][]KeyFunc{{ClientIP("remote_address", nil)}}, CostReports: true,
	})
	if w := do(h, "198.51.100.8:1"); w.Code != 200 {
		t.Fatalf("first request: %d", w.Code)
	}
	if w := do(h, "198.51.100.8:1"); w.Code != 429 {
		t.Errorf("after a request that really cost the whole quota: %d, want 429", w.Code)
	}
}

// A shadow-mode rule that denied was only looked at by the check: the
// settlement charges it the whole real cost, not the difference.
func TestSettleShadowed(t *testing.T) {
	e := newEngine(t, storetest.NewClock(), nil)
	shadow := rules.Entry{Key: "shadow", Value: "s"}
	h := mustNew(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ReportCost(r, 1) }), Config{
		Checker: e, Domain: "web", Descriptors: [][]KeyFunc{{Static("shadow", "s")}}, Cost: func(*http.Request) uint64 { return 2 }, CostReports: true,
	})
	// trial allows 1 a minute: a check of 2 is denied by the shadow rule,
	// admitted, and charges nothing; the real cost of 1 is then charged.
	if w := do(h, "198.51.100.9:1"); w.Code != 200 {
		t.Fatalf("request: %d", w.Code)
	}
	if got := remaining(t, e, shadow); got != 0 {
		t.Errorf("trial remaining: %d, want 0 (the real cost, 1, charged)", got)
	}
}

func TestSettleNotOnPanic(t *testing.T) {
	e := newEngine(t, storetest.NewClock(), nil)
	h := mustNew(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ReportCost(r, 3)
		panic(http.ErrAbortHandler)
	}), Config{Checker: e, Domain: "web", Descriptors: [][]KeyFunc{{ClientIP("remote_address", nil)}}, CostReports: true})
	func() {
		defer func() { _ = recover() }()
		do(h, "198.51.100.10:1")
	}()
	if got := remaining(t, e, ip("198.51.100.10")); got != 2 {
		t.Errorf("after a panicking handler: remaining %d, want 2 (the estimate stands)", got)
	}
}

func TestReportCostWithoutMiddleware(t *testing.T) {
	if ReportCost(httptest.NewRequest("GET", "/", nil), 5) {
		t.Error("ReportCost without the middleware = true, want false")
	}
	e := newEngine(t, storetest.NewClock(), nil)
	var heard bool
	h := mustNew(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { heard = ReportCost(r, 1) }),
		Config{Checker: e, Domain: "web", Descriptors: [][]KeyFunc{{ClientIP("remote_address", nil)}}})
	do(h, "198.51.100.11:1")
	if heard {
		t.Error("ReportCost under a middleware without CostReports = true, want false")
	}
}

func TestSettleNeedsCharger(t *testing.T) {
	for _, cfg := range []Config{
		{Checker: failingChecker{}, Domain: "web", CostReports: true},
		{Checker: failingChecker{}, Domain: "web", ActualCost: func(*http.Request, Written) (uint64, bool) { return 1, true }},
	} {
		if _, err := New(http.NotFoundHandler(), cfg); err == nil || !strings.Contains(err.Error(), "Charger") {
			t.Errorf("New with a Checker that cannot charge: %v, want an error naming Charger", err)
		}
	}
}

// TestRecorder: the writer a computed cost reads passes the handler's
// writes on, sees through informational answers, and unwraps for
// http.ResponseController.
func TestRecorder(t *testing.T) {
	got := make(chan Written, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		rec := &recorder{ResponseWriter: w}
		rec.WriteHeader(http.StatusEarlyHints)
		rec.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(rec, "abc")
		if err := http.NewResponseController(rec).Flush(); err != nil {
			t.Errorf("Flush through the recorder: %v", err)
		}
		got <- rec.written()
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if w := <-got; w != (Written{Status: http.StatusCreated, Bytes: 3}) || resp.StatusCode != http.StatusCreated || string(body) != "abc" {
		t.Errorf("written = %+v, answer %d %q; want 201, 3 bytes, abc", w, resp.StatusCode, body)
	}
	if w := (&recorder{}).written(); w.Status != http.StatusOK {
		t.Errorf("status of a handler that wrote nothing: %d, want 200", w.Status)
	}
}

// TestLeakyBucketRefund: a request a leaky_bucket admitted with a delay
// over MaxDelay is refused with 503 and its place in the queue given back;
// so is one whose client leaves during its delay.
func TestLeakyBucketRefund(t *testing.T) {
	e := newEngine(t, storetest.NewClock(), nil)
	queue := rules.Entry{Key: "queue", Value: "q"}
	h := mustNew(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), Config{
		Checker: e, Domain: "web", Descriptors: [][]KeyFunc{{Static("queue", "q")}}, MaxDelay: 50 * time.Millisecond,
	})
	// 10 a second, burst 100, the store clock standing still: the first
	// request goes at once, the next would wait 100ms.
	if w := do(h, "198.51.100.12:1"); w.Code != 200 {
		t.Fatalf("first request: %d", w.Code)
	}
	for i := range 3 {
		if w := do(h, "198.51.100.12:1"); w.Code != 503 {
			t.Fatalf("request %d over MaxDelay: %d, want 503", i, w.Code)
		}
	}
	if got := remaining(t, e, queue); got != 99 {
		t.Errorf("queue room after one admitted and three refused: %d, want 99 (the refused ones refunded)", got)
	}

	slow := mustNew(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("a dropped request reached the handler") }), Config{
		Checker: e, Domain: "web", Descriptors: [][]KeyFunc{{Static("queue", "q")}},
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	slow.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil).WithContext(ctx))
	if got := remaining(t, e, queue); got != 99 {
		t.Errorf("queue room after a client left during its delay: %d, want 99 (refunded)", got)
	}
}

// TestSettleStoreError: a settlement the store refuses goes to OnError; the
// response is unaffected.
func TestSettleStoreError(t *testing.T) {
	clock := storetest.NewClock()
	mem := memory.New(memory.Options{Now: clock.Now})
	t.Cleanup(func() { mem.Close() })
	st := &flakyStore{next: mem}
	e := newEngine(t, clock, st)
	var errs []error
	h := mustNew(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st.down.Store(true)
		ReportCost(r, 3)
		_, _ = io.WriteString(w, "ok")
	}), Config{Checker: e, Domain: "web", Descriptors: [][]KeyFunc{{ClientIP("remote_address", nil)}}, CostReports: true,
		OnError: func(_ *http.Request, err error) { errs = append(errs, err) }})
	if w := do(h, "198.51.100.13:1"); w.Code != 200 || w.Body.String() != "ok" {
		t.Errorf("response: %d %q, want 200 ok", w.Code, w.Body.String())
	}
	if len(errs) != 1 || !errors.Is(errs[0], errFlaky) {
		t.Errorf("OnError got %v, want one error wrapping the store's", errs)
	}
}

var errFlaky = errors.New("store down (test)")

// flakyStore passes Takes to next until down.
type flakyStore struct {
	next sluice.Store
	down atomic.Bool
}

func (f *flakyStore) Take(ctx context.Context, ops []sluice.Op, res []sluice.Result) error {
	if f.down.Load() {
		return errFlaky
	}
	return f.next.Take(ctx, ops, res)
}
