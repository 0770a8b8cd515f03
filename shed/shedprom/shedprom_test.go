package shedprom

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-rl/sluice/shed"
	"github.com/sluice-rl/sluice/store/memory"
)

func TestCollector(t *testing.T) {
	st := memory.New(memory.Options{})
	defer st.Close()
	s, err := shed.New(shed.Config{
		Adaptive: &shed.AdaptiveConfig{InitialLimit: 30},
		Worker:   &shed.WorkerConfig{MaxInFlight: 10},
		Fleet:    &shed.FleetConfig{Capacity: 2, Reserve: 0.5},
	}, shed.Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tk, _ := s.Admit(ctx, shed.Default)
	defer tk.Done(ctx, shed.Succeeded)
	if _, r := s.Admit(ctx, shed.Default); r == nil || r.Layer != shed.LayerFleet {
		t.Fatalf("second default: %+v, want shed by the fleet", r)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(New(s))
	want := `
# HELP sluice_shed_fleet_capacity Fleet capacity configured: requests per window (mode rate) or in flight (mode inflight).
# TYPE sluice_shed_fleet_capacity gauge
sluice_shed_fleet_capacity{mode="rate"} 2
# HELP sluice_shed_fleet_reserve_ratio Share of the fleet capacity reserved for critical requests.
# TYPE sluice_shed_fleet_reserve_ratio gauge
sluice_shed_fleet_reserve_ratio 0.5
# HELP sluice_shed_adaptive_limit The adaptive concurrency limit (critical requests may use all of it, other classes their level of it).
# TYPE sluice_shed_adaptive_limit gauge
sluice_shed_adaptive_limit 30
# HELP sluice_shed_adaptive_dropped_ratio Share of the adaptive limiter's last window of requests that the server failed (5xx, gRPC Unavailable…); above drop_ratio the limit falls.
# TYPE sluice_shed_adaptive_dropped_ratio gauge
sluice_shed_adaptive_dropped_ratio 0
# HELP sluice_shed_inflight Requests admitted by the load shedder and not yet done.
# TYPE sluice_shed_inflight gauge
sluice_shed_inflight 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_shed_fleet_capacity",
		"sluice_shed_fleet_reserve_ratio", "sluice_shed_adaptive_limit", "sluice_shed_adaptive_dropped_ratio", "sluice_shed_inflight"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg, "sluice_shed_finished_total"); err != nil || n != 3 {
		t.Errorf("sluice_shed_finished_total series %d (%v), want 3 (one per outcome)", n, err)
	}
	n, err := testutil.GatherAndCount(reg, "sluice_shed_shed_total")
	if err != nil || n != 12 {
		t.Errorf("sluice_shed_shed_total series %d (%v), want 12 (3 layers × 4 classes)", n, err)
	}
}
