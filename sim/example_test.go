package sim_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/sim"
)

// Replay a boundary attack against two algorithms and compare the most each
// admitted in any window with the quota.
func ExampleRun() {
	s := sim.Scenario{
		Name:       "boundary",
		Workload:   sim.Workload{Kind: sim.Boundary, Keys: 1, Duration: 10 * time.Second},
		Limit:      sluice.Limit{Quota: 100, Window: time.Second},
		Algorithms: []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingLog},
	}
	results, err := sim.Run(context.Background(), []sim.Scenario{s}, sim.Options{Seed: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range results {
		fmt.Printf("%s: admitted %d of %d, at most %.2f× the quota in one window\n",
			r.Algorithm, r.Admitted, r.Decisions, r.Overshoot)
	}
	// Output:
	// fixed_window: admitted 800 of 800, at most 2.00× the quota in one window
	// sliding_log: admitted 400 of 800, at most 1.00× the quota in one window
}
