package fleet

import (
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/proof/check"
)

// result builds a Result from a history of one fixed-window rule, checked.
func result(name string, admitted int, faults ...check.Fault) Result {
	rules := []check.Rule{{Name: "fw", Kind: "window", Quota: 20, WindowUS: 1e6, FailureMode: "closed"}}
	var evs []check.Event
	for i := range admitted {
		t := int64(10_000_000 + i*1000)
		evs = append(evs, check.Event{Rule: "fw", Key: "u0", Cost: 1, Send: t, Recv: t + 500, Verdict: check.Allowed})
	}
	evs = append(evs, check.Event{Rule: "fw", Key: "u0", Cost: 1, Send: 10_900_000, Recv: 10_900_500, Verdict: check.Denied})
	h := check.History{Rules: rules, Events: evs, Faults: faults}
	return Result{Schedule: Schedule{Name: name, Store: "single"}, History: h, Report: check.Check(h),
		Denied: map[string]int{"fw": 1}, Degraded: map[string]int{}}
}

func TestTable(t *testing.T) {
	loss := check.Fault{Name: "restart", Kind: "loss", Start: 10_000_000, End: 10_100_000}
	tests := []struct {
		r    Result
		want string
	}{
		{result("at the limit", 20), "| at the limit | single | 20 / 20 | — | — | — | — | — | — | — | — | — | — | — | — | — | — | PASS |"},
		{result("one over", 21), "| one over | single | 21 / 20 | — | — | — | — | — | — | — | — | — | — | — | — | — | — | FAIL (1) |"},
		{result("a loss", 30, loss), "| a loss | single | 30 / 40 | — | — | — | — | — | — | — | — | — | — | — | — | — | — | PASS |"},
	}
	for _, tc := range tests {
		if got := Table([]Result{tc.r}); !strings.Contains(got, tc.want+"\n") {
			t.Errorf("table:\n%s\nwant the row\n%s", got, tc.want)
		}
	}
}

func TestProblems(t *testing.T) {
	r := result("no denial", 5)
	r.Denied = map[string]int{}
	r.Schedule.Degrades = true
	got := r.Problems()
	if len(got) != 2 || Verdict(r) != "FAIL (2)" {
		t.Errorf("a run that denied nothing and degraded nothing: got %q (%s), want two problems, FAIL (2)", got, Verdict(r))
	}
}

// TestSVG: the plot is well-formed XML with a panel per cell, its bars
// and the bound line.
func TestSVG(t *testing.T) {
	cells := []Cell{{result("a", 20), "fw", "u0"}, {result("b", 30, check.Fault{Name: "x", Kind: "loss", Start: 10_000_000, End: 10_200_000}), "fw", "u0"}}
	svg := SVG(cells)
	dec := xml.NewDecoder(strings.NewReader(svg))
	counts := map[string]int{}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, svg)
		}
		if se, ok := tok.(xml.StartElement); ok {
			counts[se.Name.Local]++
		}
	}
	if counts["path"] != 2 || counts["rect"] != 4 {
		t.Errorf("elements %v: want 2 bound lines; 4 rects: the background, one bar a panel, the shaded fault", counts)
	}
	if !strings.Contains(svg, "<title>30 admitted, bound 40</title>") {
		t.Errorf("the loss panel's bar: want 30 admitted against a moved bound of 40:\n%s", svg)
	}
}

func TestSlug(t *testing.T) {
	if got, want := Slug(Schedule{Name: "Redis SIGSTOP 1.5 s", Store: "single"}), "single-redis-sigstop-1-5-s"; got != want {
		t.Errorf("Slug: got %q, want %q", got, want)
	}
}

// TestProgram: outside go test, Fatal ends the function and comes back as
// the error, and the cleanups run last first.
func TestProgram(t *testing.T) {
	var order []string
	err := Program("x", t.Logf, func(tb TB) {
		tb.Cleanup(func() { order = append(order, "first") })
		tb.Cleanup(func() { order = append(order, "second") })
		tb.Fatalf("stop here %d", 1)
		order = append(order, "after Fatal")
	})
	if err == nil || err.Error() != "stop here 1" {
		t.Errorf("error: got %v, want stop here 1", err)
	}
	if strings.Join(order, ",") != "second,first" {
		t.Errorf("ran %v, want the cleanups last first and nothing after Fatal", order)
	}
}
