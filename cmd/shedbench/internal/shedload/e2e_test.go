package shedload

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/shed"
)

// mix is the issue's: 10% critical (the rest default, sheddable and test).
var mix = [shed.NumPriorities]float64{shed.Critical: 0.1, shed.Default: 0.6, shed.Sheddable: 0.2, shed.Test: 0.1}

// TestEndToEnd offers 3 × capacity to a real backend through the gateway
// with the adaptive limiter on, for a few seconds of real time. The
// thresholds have wide margins so that they hold on a loaded 2-core CI host;
// the tight figures come from the simulation (shedsim) and the benchmark
// command.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("real load for a few seconds; skipped with -short")
	}
	const workers, service = 10, 500 * time.Millisecond // capacity 20/s
	backend := NewBackend(workers, service)
	up := httptest.NewServer(backend)
	defer up.Close()
	defer backend.Close()
	client := Client()
	ctx := context.Background()

	h, _, closeGW, err := Gateway(up.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	gw := httptest.NewServer(h)
	unloaded := Run(ctx, Load{URL: gw.URL, Rate: 4, Duration: 3 * time.Second, Mix: mix,
		PriorityHeader: "Sluice-Priority", Timeout: 5 * time.Second, Seed: 1}, client)
	gw.Close()
	closeGW()

	h, s, closeGW, err := Gateway(up.URL, &shed.Config{Adaptive: &shed.AdaptiveConfig{InitialLimit: 10, SampleWindow: 500 * time.Millisecond, MinSamples: 5, ProbeSamples: 10}})
	if err != nil {
		t.Fatal(err)
	}
	defer closeGW()
	gw = httptest.NewServer(h)
	defer gw.Close()
	res := Run(ctx, Load{URL: gw.URL, Rate: 60, Duration: 8 * time.Second, Warmup: 3 * time.Second, Mix: mix,
		PriorityHeader: "Sluice-Priority", Timeout: 5 * time.Second, Seed: 2}, client)

	capacity := float64(workers) / service.Seconds()
	crit := res.Classes[shed.Critical]
	t.Logf("unloaded p99 %v; loaded: p99 %v, goodput %.0f/s of %.0f, critical %d/%d, limiter %+v",
		unloaded.P99, res.P99, res.Goodput, capacity, crit.OK, crit.Offered, s.Stats().Adaptive)
	if got := crit.SuccessRatio(); got < 0.9 {
		t.Errorf("critical success %.3f (%+v), want ≥ 0.9", got, crit)
	}
	if c, d := crit.SuccessRatio(), res.Classes[shed.Default].SuccessRatio(); c <= d {
		t.Errorf("critical success %.3f not above default's %.3f", c, d)
	}
	if got := res.Goodput / capacity; got < 0.6 {
		t.Errorf("goodput %.0f/s = %.2f of capacity, want ≥ 0.6", res.Goodput, got)
	}
	if res.P99 > 3*unloaded.P99 {
		t.Errorf("admitted p99 %v, want ≤ 3 × unloaded p99 %v", res.P99, unloaded.P99)
	}
	if shed := res.Classes[shed.Test].Shed; shed == 0 {
		t.Errorf("no test request shed at 3 × capacity")
	}
}
