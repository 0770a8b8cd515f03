package fleet

import (
	"encoding/json"
	"fmt"
	"html"
	"os"
	"path/filepath"
	"strings"

	"github.com/sluice-rl/sluice/internal/proof/check"
)

// columns of the matrix: the checker's rule names and what they are.
var columns = []struct{ rule, title string }{
	{"fw", "fixed window"},
	{"log", "sliding log"},
	{"gcra", "gcra"},
	{"tb", "token bucket"},
	{"sw", "sliding window"},
	{"lb", "leaky bucket"},
	{"conc", "concurrency"},
	{"loc", "local fallback"},
	{"hyb", "hybrid"},
	{"hgcra", "hybrid gcra"},
	{"htb", "hybrid token bucket"},
	{"acme", "tenant override"},
	{"hourly", "tenant hourly"},
	{"mt", "LLM budget, max_tokens reserved"},
	{"est", "LLM budget, estimate reserved"},
}

// Table renders the matrix in markdown: a row per schedule (fault and
// store), a column per rule (algorithm and placement), each cell the most
// admissions seen in one checked span against the bound there, and the
// row's verdict. Rules a schedule did not run show "—".
func Table(results []Result) string {
	var b strings.Builder
	b.WriteString("| fault | Redis |")
	for _, c := range columns {
		fmt.Fprintf(&b, " %s |", c.title)
	}
	b.WriteString(" result |\n|---|---|")
	for range columns {
		b.WriteString("---|")
	}
	b.WriteString("---|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %s |", r.Schedule.Name, r.Schedule.Store)
		for _, c := range columns {
			w, ok := r.Report.Worst[c.rule]
			if !ok {
				b.WriteString(" — |")
				continue
			}
			fmt.Fprintf(&b, " %d / %d", w.Admitted, w.Bound)
			if m, ok := r.Report.Moved[c.rule]; ok && m != w {
				fmt.Fprintf(&b, " (fault %d / %d)", m.Admitted, m.Bound)
			}
			if l, ok := r.Report.Local[c.rule]; ok {
				fmt.Fprintf(&b, " (own %d / %d)", l.Admitted, l.Bound)
			}
			if f, ok := r.Report.Fleet[c.rule]; ok {
				fmt.Fprintf(&b, " (fleet %d / %d)", f.Admitted, f.Bound)
			}
			b.WriteString(" |")
		}
		fmt.Fprintf(&b, " %s |\n", Verdict(r))
	}
	return b.String()
}

// Verdict is PASS, or FAIL with the number of violations and problems.
func Verdict(r Result) string {
	n := len(r.Report.Violations) + len(r.Problems())
	if n == 0 {
		return "PASS"
	}
	return fmt.Sprintf("FAIL (%d)", n)
}

// Slug names a schedule's files: its store and name, lower case, runs of
// other characters as one '-'.
func Slug(s Schedule) string {
	var b strings.Builder
	dash := false
	for _, c := range strings.ToLower(s.Store + " " + s.Name) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			b.WriteRune(c)
			dash = false
		} else if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.Trim(b.String(), "-")
}

// WriteHistory writes one run into dir: <slug>.jsonl, the history as
// check.WriteJSONL writes it (rules, the faults as they happened, reloads,
// resets, every decision), which `sluice-bench proof --check` reads back.
func WriteHistory(dir string, r Result) error {
	fh, err := os.Create(filepath.Join(dir, Slug(r.Schedule)+".jsonl"))
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	if err := check.WriteJSONL(fh, r.History); err != nil {
		fh.Close()
		return err
	}
	if err := fh.Close(); err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	return nil
}

// scheduleJSON is one schedule as written to schedule.json.
type scheduleJSON struct {
	Name     string   `json:"name"`
	Store    string   `json:"store"`
	Tenants  bool     `json:"tenants"`
	Duration string   `json:"duration"`
	Seed     uint64   `json:"seed"`
	File     string   `json:"history"`
	Planned  []string `json:"planned"` // "at 1.5s: SIGSTOP redis"
	Ran      []string `json:"ran"`     // what happened, with times
	Verdict  string   `json:"verdict"`
	Problems []string `json:"problems,omitempty"`
}

// WriteSchedule writes schedule.json: every schedule's faults as planned
// and as they ran, its seed and its history file.
func WriteSchedule(dir string, seeds []uint64, results []Result) error {
	var out []scheduleJSON
	for i, r := range results {
		s := scheduleJSON{Name: r.Schedule.Name, Store: r.Schedule.Store, Tenants: r.Schedule.Tenants,
			Duration: r.Schedule.Duration.String(), Seed: seeds[i], File: Slug(r.Schedule) + ".jsonl",
			Ran: r.Log, Verdict: Verdict(r), Problems: r.Problems()}
		for _, f := range r.Schedule.Faults {
			s.Planned = append(s.Planned, fmt.Sprintf("at %v: %s", f.At, f.Name))
		}
		out = append(out, s)
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "schedule.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	return nil
}

// Cell picks one rule and key of one run for the plot.
type Cell struct {
	Result    Result
	Rule, Key string
}

// PlotCells picks the cells worth a look from results: the fixed window
// with no fault, and under each fault that moves its bound (a restart or
// failover that may lose charges, a reload), and the tenant override
// through the PostgreSQL outage. (The clock row's point is each
// instance's local share, which the table gives.)
func PlotCells(results []Result) []Cell {
	var out []Cell
	for _, r := range results {
		moves := false
		for _, f := range r.History.Faults {
			moves = moves || f.Kind == "loss" || f.Kind == "reload"
		}
		switch {
		case r.Schedule.Skew != 0: // its point is the local share: in the table
		case r.Schedule.Tenants:
			out = append(out, Cell{r, "acme", Tenant})
		case len(r.Schedule.Faults) == 0 && r.Schedule.Store == "single", moves:
			out = append(out, Cell{r, "fw", "u0"})
		}
	}
	return out
}

// SVG plots each cell: admissions per window (bars) against the bound the
// checker holds that window to (the line), with the faults shaded. It is
// written by hand, a panel per cell.
func SVG(cells []Cell) string {
	const (
		width, panelH, left, right, top, gap = 760, 130, 48, 12, 28, 36
	)
	height := top + len(cells)*(panelH+gap) + 10
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	b.WriteString(`<text x="8" y="16" font-size="13">Admissions per 1 s window (bars, certainly inside the window) against the bound the checker holds it to (red); faults shaded, from injection to recovery</text>` + "\n")
	for i, c := range cells {
		y0 := top + i*(panelH+gap) + 16
		ws := check.Windows(c.Result.History, c.Rule, c.Key)
		if len(ws) == 0 {
			continue
		}
		t0, t1 := ws[0].From, ws[len(ws)-1].To
		var ymax int64 = 1
		for _, w := range ws {
			ymax = max(ymax, w.Admitted, w.Bound)
		}
		ymax += ymax / 5
		plotW := float64(width - left - right)
		x := func(t int64) float64 { return float64(left) + plotW*float64(t-t0)/float64(t1-t0) }
		y := func(v int64) float64 { return float64(y0) + float64(panelH)*(1-float64(v)/float64(ymax)) }
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="12">%s — %s, rule %s, key %s: %s</text>`+"\n", left, y0-4,
			html.EscapeString(c.Result.Schedule.Store), html.EscapeString(c.Result.Schedule.Name), c.Rule, html.EscapeString(c.Key), Verdict(c.Result))
		for _, f := range c.Result.History.Faults {
			if f.Kind == "clock" {
				continue // lasts the whole run
			}
			a, z := max(f.Start, t0), min(max(f.End, f.Start+20000), t1)
			if z <= a {
				continue
			}
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#f6c343" fill-opacity="0.35"><title>%s</title></rect>`+"\n",
				x(a), y0, x(z)-x(a), panelH, html.EscapeString(f.Name))
		}
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#888"/>`+"\n", left, y0+panelH, width-right, y0+panelH)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#888"/>`+"\n", left, y0, left, y0+panelH)
		for _, v := range []int64{0, ymax / 2, ymax} {
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%d</text>`+"\n", left-4, y(v)+4, v)
		}
		var path strings.Builder
		for j, w := range ws {
			bx, bw := x(w.From)+1, x(w.To)-x(w.From)-2
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#4878b0"><title>%d admitted, bound %d</title></rect>`+"\n",
				bx, y(w.Admitted), bw, y(0)-y(w.Admitted), w.Admitted, w.Bound)
			cmd := "L"
			if j == 0 {
				cmd = "M"
			}
			fmt.Fprintf(&path, "%s%.1f,%.1f L%.1f,%.1f ", cmd, x(w.From), y(w.Bound), x(w.To), y(w.Bound))
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%ds</text>`+"\n", x(w.From)+(x(w.To)-x(w.From))/2, y0+panelH+13, (w.From-t0)/1e6)
		}
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="#c0392b" stroke-width="2"/>`+"\n", strings.TrimSpace(path.String()))
	}
	b.WriteString("</svg>\n")
	return b.String()
}
