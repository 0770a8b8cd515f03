package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Report is the output of a run: the results and how they were made.
type Report struct {
	// Command reproduces the run.
	Command string `json:"command"`
	// Seed seeded every key's traffic.
	Seed uint64 `json:"seed"`
	// Decisions is the total over all results.
	Decisions int64 `json:"decisions"`
	// ElapsedS is the wall time of the run, in seconds.
	ElapsedS float64  `json:"elapsed_s"`
	Results  []Result `json:"results"`
}

// WriteJSON writes the report as indented JSON.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report as aligned text tables, one per group.
func (r Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "sluice simulate: seed %d, %d decisions in %.1fs\n", r.Seed, r.Decisions, r.ElapsedS)
	fmt.Fprintln(w, "exact = sliding log over the same window, applied to each algorithm's own admissions;")
	fmt.Fprintln(w, "overshoot = most units admitted in any window / quota; burst = most in any tenth of a window / quota")
	groups := []struct{ id, title string }{
		{GroupLoad, "Poisson traffic at several loads (offered / limit), global placement"},
		{GroupWorkload, "Other workloads, global placement"},
		{GroupPlacement, "Fleets: placement × instances (Poisson 16× the limit)"},
		{GroupSync, "Hybrid (modelled): sync interval, 8 instances (Poisson 16× the limit)"},
		{GroupCountAll, "Every hit counted, denied ones too (exact = all hits in the trailing window)"},
		{"", "Scenarios"},
	}
	for _, g := range groups {
		var rows []Result
		for _, res := range r.Results {
			if res.Group == g.id || (g.id == "" && !knownGroup(res.Group)) {
				rows = append(rows, res)
			}
		}
		if len(rows) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s\n", g.title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "scenario\tload\talgorithm\tdecisions\tadmitted (vs exact)\tfalse accepts\tfalse rejects\twrong\tovershoot\tburst\trecover\tstate B\tstore ops\t")
		for _, x := range rows {
			rec := "-"
			if x.RecoveryMS >= 0 {
				rec = fmt.Sprintf("%.0fms", x.RecoveryMS)
			}
			fmt.Fprintf(tw, "%s\t%.2f\t%s\t%d\t%d (%.2f×)\t%s\t%s\t%s\t%.2f×\t%.2f×\t%s\t%d\t%.3f\t\n",
				x.Scenario, x.Load, x.Algorithm, x.Decisions, x.Admitted, x.AdmittedRatio,
				countRate(x.FalseAccepts, x.FalseAcceptRate), countRate(x.FalseRejects, x.FalseRejectRate),
				pct(x.WrongRate), x.Overshoot, x.Burst, rec, x.StateBytes, x.StoreOps)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if r.Command != "" {
		fmt.Fprintf(w, "\nreproduce: %s\n", r.Command)
	}
	return nil
}

func knownGroup(g string) bool {
	switch g {
	case GroupLoad, GroupWorkload, GroupPlacement, GroupSync, GroupCountAll:
		return true
	}
	return false
}

func countRate(n int64, rate float64) string {
	return fmt.Sprintf("%d (%s)", n, pct(rate))
}

// pct formats a rate as a percentage with enough digits for small rates.
func pct(x float64) string {
	switch {
	case x == 0:
		return "0%"
	case x < 0.0001:
		return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.4f", 100*x), "0"), ".") + "%"
	case x < 0.01:
		return fmt.Sprintf("%.3f%%", 100*x)
	}
	return fmt.Sprintf("%.2f%%", 100*x)
}
