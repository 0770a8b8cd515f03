package main

import (
	"fmt"
	"image/color"
	"os"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// sample is one time bucket of a step run.
type sample struct {
	at             time.Duration
	limit, workers int
	capacity       float64
	goodput        float64
	p50, p99       time.Duration
}

var (
	blue   = color.RGBA{R: 31, G: 119, B: 180, A: 255}
	orange = color.RGBA{R: 255, G: 127, B: 14, A: 255}
	grey   = color.RGBA{R: 120, G: 120, B: 120, A: 255}
	green  = color.RGBA{R: 44, G: 160, B: 44, A: 255}
)

// plotStep draws three panels over time: the adaptive limit against the
// workers, the admitted latency against the unloaded p99, and goodput
// against capacity.
func plotStep(file, title string, s []sample, unloadedP99 time.Duration) error {
	if len(s) == 0 {
		return errNoData
	}
	xy := func(f func(sample) (float64, bool)) plotter.XYs {
		var pts plotter.XYs
		for _, p := range s {
			if y, ok := f(p); ok {
				pts = append(pts, plotter.XY{X: p.at.Seconds(), Y: y})
			}
		}
		return pts
	}
	line := func(p *plot.Plot, name string, pts plotter.XYs, c color.Color, dashed bool) error {
		if len(pts) == 0 {
			return nil
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = c
		l.Width = vg.Points(1.5)
		if dashed {
			l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		p.Add(l)
		p.Legend.Add(name, l)
		return nil
	}
	newPlot := func(ylabel string) *plot.Plot {
		p := plot.New()
		p.Y.Label.Text = ylabel
		p.Y.Min = 0
		p.Legend.Top = true
		p.Add(plotter.NewGrid())
		return p
	}
	conc := newPlot("concurrency")
	conc.Title.Text = title
	lat := newPlot("latency (ms)")
	good := newPlot("requests/s")
	good.X.Label.Text = "time (s)"
	msOf := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	errs := []error{
		line(conc, "adaptive limit", xy(func(p sample) (float64, bool) { return float64(p.limit), p.limit > 0 }), blue, false),
		line(conc, "backend workers", xy(func(p sample) (float64, bool) { return float64(p.workers), true }), grey, true),
		line(lat, "admitted p99", xy(func(p sample) (float64, bool) { return msOf(p.p99), p.p99 > 0 }), orange, false),
		line(lat, "admitted p50", xy(func(p sample) (float64, bool) { return msOf(p.p50), p.p50 > 0 }), blue, false),
		line(lat, "2 × unloaded p99", xy(func(sample) (float64, bool) { return 2 * msOf(unloadedP99), true }), grey, true),
		line(good, "goodput (200 in time)", xy(func(p sample) (float64, bool) { return p.goodput, true }), green, false),
		line(good, "capacity C", xy(func(p sample) (float64, bool) { return p.capacity, true }), grey, true),
	}
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("plot: %w", err)
		}
	}
	end := s[len(s)-1].at.Seconds()
	var ticks []plot.Tick
	for x := 0.0; x <= end; x += 5 {
		ticks = append(ticks, plot.Tick{Value: x, Label: fmt.Sprintf("%.0f", x)})
	}
	for _, p := range []*plot.Plot{conc, lat, good} {
		p.X.Min, p.X.Max = 0, end
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
	}
	img := vgimg.New(9*vg.Inch, 9*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 3, Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8), PadY: vg.Points(6)}
	canvases := plot.Align([][]*plot.Plot{{conc}, {lat}, {good}}, tiles, dc)
	conc.Draw(canvases[0][0])
	lat.Draw(canvases[1][0])
	good.Draw(canvases[2][0])
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
