package proof

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/proof/fleet"
)

// TestShortFaultMatrix runs the short fault matrix: the schedules marked
// Short in fleet.Schedules, each on three `sluice serve --store redis`
// processes with default flags on real Redis (and PostgreSQL for tenants),
// with seeded clients recording every decision; package check holds each
// history to the documented bounds. Every rule must have been driven to
// denials (the traffic goes on after the schedule, to the rules not denied
// yet, for up to fleet.MaxExtra: a loaded host may be too slow to reach
// every limit in the schedule's time) and every fault that should degrade
// decisions must have, or the run proves nothing and fails. SLUICE_PROOF_DIR keeps the histories, the
// schedule and the matrix. The full matrix: sluice-bench proof.
func TestShortFaultMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("a fleet run of real processes; skipped with -short")
	}
	bin, err := fleet.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("SLUICE_PROOF_DIR")
	var results []fleet.Result
	var seeds []uint64
	for i, s := range fleet.Schedules() {
		if !s.Short {
			continue
		}
		seed := uint64(1000 + i)
		t.Run(s.Store+" "+s.Name, func(t *testing.T) {
			r := fleet.Run(t, fleet.Options{Bin: bin, Seed: seed}, s)
			results, seeds = append(results, r), append(seeds, seed)
			t.Logf("%s\nfaults: %s\ndegraded decisions: %v", r.Report.Summary(), strings.Join(r.Log, "; "), r.Degraded)
			for _, v := range r.Report.Violations {
				t.Errorf("%s", v)
			}
			for _, p := range r.Problems() {
				t.Error(p)
			}
			if dir != "" {
				if err := fleet.WriteHistory(dir, r); err != nil {
					t.Error(err)
				}
			}
		})
	}
	table := fleet.Table(results)
	t.Logf("fault matrix (admitted / bound in the worst span of each rule):\n%s", table)
	if dir != "" {
		if err := os.WriteFile(filepath.Join(dir, "matrix.md"), []byte(table), 0o644); err != nil {
			t.Error(err)
		}
		if err := fleet.WriteSchedule(dir, seeds, results); err != nil {
			t.Error(err)
		}
	}
}
