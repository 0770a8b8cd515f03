package sim

import (
	"cmp"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The plots WritePlots draws, by file name without extension.
const (
	PlotBoundary = "boundary" // admitted in the trailing window over time, boundary attack
	PlotLoad     = "load"     // wrong-decision rate against offered load
	PlotFleet    = "fleet"    // overshoot against fleet size, per placement
	PlotSync     = "sync"     // hybrid overshoot against sync interval
)

// palette gives each line a fixed colour (and every other line a dash) so the
// plots read the same from run to run.
var palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, {0xd6, 0x27, 0x28, 0xff}, {0x2c, 0xa0, 0x2c, 0xff},
	{0x94, 0x67, 0xbd, 0xff}, {0xff, 0x7f, 0x0e, 0xff}, {0x8c, 0x56, 0x4b, 0xff},
}

// plotted are the algorithms drawn: token_bucket and leaky_bucket decide
// exactly as gcra (their digests are equal), so one line stands for the three.
var plotted = []struct{ alg, label string }{
	{"gcra", "gcra = token_bucket = leaky_bucket"},
	{"fixed_window", "fixed_window"},
	{"sliding_window", "sliding_window"},
	{"sliding_log", "sliding_log (exact)"},
}

// WritePlots draws the plots the results allow into dir (created if
// needed), as format "png" or "svg", and returns the files written. A plot
// whose scenarios are absent is skipped.
func WritePlots(dir, format string, results []Result) ([]string, error) {
	if format != "png" && format != "svg" {
		return nil, fmt.Errorf("plot format %q: want png or svg", format)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	save := func(p *plot.Plot, name string) error {
		if p == nil {
			return nil
		}
		f := filepath.Join(dir, name+"."+format)
		if err := p.Save(18*vg.Centimeter, 11*vg.Centimeter, f); err != nil {
			return fmt.Errorf("plot %s: %w", name, err)
		}
		files = append(files, f)
		return nil
	}
	for _, mk := range []struct {
		name string
		fn   func([]Result) (*plot.Plot, error)
	}{
		{PlotBoundary, boundaryPlot}, {PlotLoad, loadPlot}, {PlotFleet, fleetPlot}, {PlotSync, syncPlot},
	} {
		p, err := mk.fn(results)
		if err != nil {
			return files, fmt.Errorf("plot %s: %w", mk.name, err)
		}
		if err := save(p, mk.name); err != nil {
			return files, err
		}
	}
	return files, nil
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	return p
}

func addLine(p *plot.Plot, pts plotter.XYs, label string, i int, points bool) error {
	l, err := plotter.NewLine(pts)
	if err != nil {
		return err
	}
	l.Color = palette[i%len(palette)]
	l.Width = vg.Points(1.5)
	if i%2 == 1 {
		l.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
	}
	p.Add(l)
	p.Legend.Add(label, l)
	if points {
		s, err := plotter.NewScatter(pts)
		if err != nil {
			return err
		}
		s.Color = l.Color
		s.Shape = draw.CircleGlyph{}
		s.Radius = vg.Points(2.5)
		p.Add(s)
	}
	return nil
}

// hline draws y = v across [x0, x1] in grey.
func hline(p *plot.Plot, v, x0, x1 float64, label string) error {
	l, err := plotter.NewLine(plotter.XYs{{X: x0, Y: v}, {X: x1, Y: v}})
	if err != nil {
		return err
	}
	l.Color = color.Gray{Y: 0x80}
	l.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
	p.Add(l)
	p.Legend.Add(label, l)
	return nil
}

func boundaryPlot(results []Result) (*plot.Plot, error) {
	var rs []Result
	for _, r := range results {
		if r.Group == GroupWorkload && r.Workload == "boundary attack" && len(r.Series) > 0 {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		return nil, nil
	}
	p := newPlot("Boundary attack: units admitted in the trailing window ("+rs[0].Limit+")",
		"time (s)", "admitted in (t − window, t]")
	last := rs[0].Series[len(rs[0].Series)-1].T
	for i, pl := range plotted {
		j := slices.IndexFunc(rs, func(r Result) bool { return r.Algorithm == pl.alg })
		if j < 0 {
			continue
		}
		pts := make(plotter.XYs, len(rs[j].Series))
		for k, s := range rs[j].Series {
			pts[k] = plotter.XY{X: s.T, Y: float64(s.Units)}
		}
		if err := addLine(p, pts, pl.label, i, false); err != nil {
			return nil, err
		}
	}
	quota := float64(rs[0].Series[0].Units)
	if j := slices.IndexFunc(rs, func(r Result) bool { return r.Algorithm == "sliding_log" }); j >= 0 {
		quota = 0
		for _, s := range rs[j].Series {
			quota = max(quota, float64(s.Units))
		}
	}
	if quota > 0 {
		if err := hline(p, quota, 0, last, "quota"); err != nil {
			return nil, err
		}
		p.Y.Max = 2.8 * quota // room for the legend above fixed_window's 2×
		p.Y.Tick.Marker = steps(quota/2, p.Y.Max)
	}
	p.Y.Min = 0
	return p, nil
}

func loadPlot(results []Result) (*plot.Plot, error) {
	p := newPlot("Wrong decisions against offered load (Poisson, global)", "offered load / limit", "wrong decisions (% of hits)")
	n, err := algorithmLines(p, results, GroupLoad, func(r Result) plotter.XY { return plotter.XY{X: r.Load, Y: 100 * r.WrongRate} })
	if n == 0 || err != nil {
		return nil, err
	}
	p.Legend.Left = false
	p.Y.Min = 0
	p.Y.Max = 100
	return p, nil
}

// fleetAlg is the algorithm whose overshoot the fleet plots show: the exact
// one, so what they show is what the placement adds.
const fleetAlg = "sliding_log"

func fleetPlot(results []Result) (*plot.Plot, error) {
	p := newPlot("Overshoot against fleet size ("+fleetAlg+", Poisson 16× the limit)", "instances", "most admitted in any window / quota")
	p.X.Scale = plot.LogScale{}
	var ticks []plot.Tick
	for _, n := range FleetSizes {
		ticks = append(ticks, plot.Tick{Value: float64(n), Label: fmt.Sprint(n)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	n := 0
	for i, kind := range []PlacementKind{Local, Split, Global, Hybrid} {
		var pts plotter.XYs
		label := string(kind)
		for _, r := range results {
			if r.Group == GroupPlacement && r.Algorithm == fleetAlg && r.Kind == kind {
				pts = append(pts, plotter.XY{X: float64(r.Instances), Y: r.Overshoot})
				if kind == Hybrid {
					label = fmt.Sprintf("hybrid, sync %gms (modelled)", r.SyncMS)
				}
			}
		}
		if len(pts) == 0 {
			continue
		}
		sortByX(pts)
		if err := addLine(p, pts, label, i, true); err != nil {
			return nil, err
		}
		n++
	}
	if n == 0 {
		return nil, nil
	}
	p.Y.Min = 0
	return p, nil
}

func syncPlot(results []Result) (*plot.Plot, error) {
	p := newPlot("Hybrid (modelled): overshoot against sync interval, 8 instances", "sync interval (ms)", "most admitted in any window / quota")
	p.X.Scale = plot.LogScale{}
	var ticks []plot.Tick
	for _, d := range SyncIntervals {
		ms := float64(d) / float64(time.Millisecond)
		ticks = append(ticks, plot.Tick{Value: ms, Label: fmt.Sprint(ms)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	n, err := algorithmLines(p, results, GroupSync, func(r Result) plotter.XY { return plotter.XY{X: r.SyncMS, Y: r.Overshoot} })
	if n == 0 || err != nil {
		return nil, err
	}
	if err := hline(p, 1, SyncIntervals[0].Seconds()*1000, SyncIntervals[len(SyncIntervals)-1].Seconds()*1000, "quota"); err != nil {
		return nil, err
	}
	p.Y.Min = 0
	p.Y.Max = 2.6 // room for the legend above gcra's own 2×
	p.Y.Tick.Marker = steps(0.5, p.Y.Max)
	return p, nil
}

// algorithmLines adds a line for each plotted algorithm with results in
// group, a point xy(r) for each, and returns how many lines it added.
func algorithmLines(p *plot.Plot, results []Result, group string, xy func(Result) plotter.XY) (int, error) {
	n := 0
	for i, pl := range plotted {
		var pts plotter.XYs
		for _, r := range results {
			if r.Group == group && r.Algorithm == pl.alg {
				pts = append(pts, xy(r))
			}
		}
		if len(pts) == 0 {
			continue
		}
		sortByX(pts)
		if err := addLine(p, pts, pl.label, i, true); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func sortByX(pts plotter.XYs) {
	slices.SortFunc(pts, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
}

// steps labels 0, step, 2·step, … up to most.
func steps(step, most float64) plot.ConstantTicks {
	var t plot.ConstantTicks
	for v := 0.0; v <= most+step/1e6; v += step {
		t = append(t, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
	}
	return t
}
