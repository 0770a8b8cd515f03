package httplimit

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-rl/sluice/headers"
	"github.com/sluice-rl/sluice/shed"
	"github.com/sluice-rl/sluice/store/storetest"
)

// TestShedChargesNothing: with four requests holding the worker layer's
// default share, a fifth default request is shed with 503 before the rate
// limits see it, so its caller's quota is intact; a critical one still goes
// through.
func TestShedChargesNothing(t *testing.T) {
	clock := storetest.NewClock()
	release := make(chan struct{})
	entered := make(chan struct{}, 10)
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Block") != "" {
			entered <- struct{}{}
			<-release
		}
		w.WriteHeader(http.StatusOK)
	})
	limited := mustNew(t, app, Config{
		Checker:     newEngine(t, clock, nil),
		Domain:      "web",
		Descriptors: [][]KeyFunc{{ClientIP("remote_address", nil)}},
	})
	sh, err := shed.New(shed.Config{
		Priority: shed.PriorityConfig{Max: shed.Critical}, // callers may ask for any class
		Worker:   &shed.WorkerConfig{MaxInFlight: 5},
	}, shed.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	h, err := Shed(limited, ShedConfig{Shedder: sh})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 4 { // default's level: 0.8 × 5
		wg.Go(func() {
			if w := do(h, "10.0.0."+string(rune('1'+i))+":1", "Block", "1"); w.Code != 200 {
				t.Errorf("blocking request %d: %d, want 200", i, w.Code)
			}
		})
	}
	for range 4 {
		<-entered
	}
	w := do(h, "10.0.0.9:1")
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("fifth default request: %d, want 503", w.Code)
	}
	if got := w.Header().Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After %q, want 1", got)
	}
	if got := w.Header().Get("Content-Type"); got != headers.ContentTypeProblem {
		t.Errorf("Content-Type %q, want %s", got, headers.ContentTypeProblem)
	}
	p, err := headers.ParseProblem(w.Body.Bytes())
	if err != nil || p.Status != 503 || p.Layer != "worker_utilization" || p.Priority != "default" {
		t.Errorf("body %s (%v), want a 503 problem with layer worker_utilization, priority default", w.Body, err)
	}
	if got := fieldOf(w, "RateLimit"); got != "" {
		t.Errorf("shed response carries RateLimit %q, want none (the rate limits were not asked)", got)
	}
	if w := do(h, "10.0.0.9:1", "Sluice-Priority", "critical"); w.Code != 200 {
		t.Errorf("critical request: %d, want 200", w.Code)
	}
	close(release)
	wg.Wait()
	// The shed request charged nothing: 10.0.0.9 has used 1 (the critical
	// one) of its 3 a minute.
	for i, want := range []int{200, 200, 429} {
		w := do(h, "10.0.0.9:1")
		if w.Code != want {
			t.Errorf("request %d after the load: %d, want %d", i, w.Code, want)
		}
		if want == 429 && strings.Contains(w.Body.String(), "layer") {
			t.Errorf("429 body %s names a shedding layer", w.Body)
		}
	}
	if st := sh.Stats(); st.InFlight != 0 || st.Shed[shed.LayerWorker][shed.Default] != 1 {
		t.Errorf("stats %+v, want nothing in flight and one default shed by the worker layer", st)
	}
}

// TestShedIgnores429: a request the rate limits refuse gives its adaptive
// slot back without a latency sample.
func TestShedIgnores429(t *testing.T) {
	sh, err := shed.New(shed.Config{Adaptive: &shed.AdaptiveConfig{ProbeSamples: 1, MinSamples: 1}}, shed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h, _ := Shed(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTooManyRequests)
	}), ShedConfig{Shedder: sh})
	for range 5 {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	}
	if st := sh.Stats().Adaptive; !st.Probing || st.MinRTT != 0 || st.InFlight != 0 {
		t.Errorf("after five 429s: %+v, want the first probe still waiting for a sample, nothing in flight", st)
	}
}

// TestShedOutcomes: the outcome each answer gives the shedder. A 5xx of the
// handler is Dropped (no latency sample, a sign to lower the adaptive
// limit), however fast; a 2xx or 4xx Succeeded; a 429, or a 503 the rate
// limits wrote themselves (failing closed), Ignored.
func TestShedOutcomes(t *testing.T) {
	tests := []struct {
		name       string
		status     int
		rateLimits bool // the answer comes from the rate-limit middleware, failing closed
		want       shed.Outcome
	}{
		{"200", http.StatusOK, false, shed.Succeeded},
		{"404", http.StatusNotFound, false, shed.Succeeded},
		{"500", http.StatusInternalServerError, false, shed.Dropped},
		{"502 (a gateway's dead upstream)", http.StatusBadGateway, false, shed.Dropped},
		{"503", http.StatusServiceUnavailable, false, shed.Dropped},
		{"429", http.StatusTooManyRequests, false, shed.Ignored},
		{"503 of the rate limits", http.StatusServiceUnavailable, true, shed.Ignored},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sh, err := shed.New(shed.Config{Adaptive: &shed.AdaptiveConfig{}}, shed.Options{})
			if err != nil {
				t.Fatal(err)
			}
			var app http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(tt.status) })
			if tt.rateLimits {
				app = mustNew(t, app, Config{Checker: failingChecker{}, FailClosed: true, Domain: "web",
					Descriptors: [][]KeyFunc{{ClientIP("remote_address", nil)}}})
			}
			h, _ := Shed(app, ShedConfig{Shedder: sh})
			for range 10 {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
				if w.Code != tt.status {
					t.Fatalf("status %d, want %d", w.Code, tt.status)
				}
			}
			var want [shed.NumOutcomes]uint64
			want[tt.want] = 10
			if st := sh.Stats(); st.Finished != want || st.Adaptive.InFlight != 0 {
				t.Errorf("ten %ds: finished %v, %d in flight; want %v (%v), none", tt.status, st.Finished, st.Adaptive.InFlight, want, tt.want)
			}
		})
	}
}
