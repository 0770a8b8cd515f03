package sim

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseTrace(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		keys     []string
		events   [][]Event
	}{
		{"csv with header and comment", "time,key,cost\n# a comment\n10.5,alice,2\n10,bob\n10.25,alice\n",
			[]string{"alice", "bob"}, [][]Event{{{At: 250_000, Cost: 1}, {At: 500_000, Cost: 2}}, {{At: 0, Cost: 1}}}},
		{"csv without header, microseconds", "0.000001,k\n0.000003,k,0\n", []string{"k"}, [][]Event{{{At: 0, Cost: 1}, {At: 2, Cost: 0}}}},
		{"json lines, numbers and RFC 3339", `{"time":"2026-01-01T00:00:01Z","key":"a"}` + "\n" + `{"time":"2026-01-01T00:00:00.5Z","key":"a","cost":3}` + "\n",
			[]string{"a"}, [][]Event{{{At: 0, Cost: 3}, {At: 500_000, Cost: 1}}}},
		{"json lines, seconds", `{"time": 3, "key": "x"}` + "\n\n" + `{"time": 1.5, "key": "y", "cost": 1}`,
			[]string{"x", "y"}, [][]Event{{{At: 1_500_000, Cost: 1}}, {{At: 0, Cost: 1}}}},
	} {
		tr, err := ParseTrace("t", strings.NewReader(tc.in))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if strings.Join(tr.Keys, ",") != strings.Join(tc.keys, ",") {
			t.Errorf("%s: keys %q, want %q", tc.name, tr.Keys, tc.keys)
		}
		for i := range tc.events {
			if i >= len(tr.Events) || !slicesEqual(tr.Events[i], tc.events[i]) {
				t.Errorf("%s: events %v, want %v", tc.name, tr.Events, tc.events)
				break
			}
		}
	}
}

func slicesEqual(a, b []Event) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestParseTraceErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "t: no hits"},
		{"1,a\nx,b\n", "t:2: time:"},
		{"1,a\n-1,b\n", "t:2: time:"},
		{"1,a,\n", "t:1: cost:"},
		{"1,a,-1\n", "t:1: cost: -1 is outside"},
		{"1,a,2000000000\n", "t:1: cost:"},
		{"1,,1\n", "t:1: key: empty"},
		{"1\n", "t:1: want time,key[,cost]"},
		{"1,a,1,1\n", "t:1: want time,key[,cost]"},
		{"1,a\n2026-01-01T00:00:00Z,a\n", "t:2: time:"},
		{"99999999999999,a\n", "t:1: time:"},
		{"1," + strings.Repeat("k", MaxTraceKey+1) + "\n", "t:1: key: longer"},
		{`{"time":1}`, "t:1: key: missing"},
		{`{"key":"a"}`, "t:1: time: missing"},
		{`{"time":1,"key":"a","extra":1}`, "t:1: json: unknown field"},
		{`{"time":1,"key":"a"} {"time":2,"key":"a"}`, "t:1: more than one JSON value"},
		{`{"time":true,"key":"a"}`, "t:1: time:"},
		{`{"time":"0001-01-01T00:00:00Z","key":"a"}` + "\n" + `{"time":"4000-01-01T00:00:00Z","key":"a"}`, "t: the hits span"},
		{"1,a\n" + strings.Repeat("x", MaxTraceLine+1) + "\n", "t:2: line longer"},
	} {
		_, err := ParseTrace("t", strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseTrace(%.40q) = %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
}

// A trace replays through the suite as its own scenario.
func TestTraceScenario(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "trace.csv"))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := ParseTrace("trace.csv", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	s := Scenario{Name: "trace", Workload: Workload{Kind: Trace, Trace: tr},
		Limit: DefaultLimit}
	s.Limit.Quota, s.Limit.Window = 3, time.Second
	rs, err := Run(context.Background(), []Scenario{s}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	fw := find(t, rs, "trace", "fixed_window")
	if fw.Decisions != int64(tr.Hits) || fw.Keys != len(tr.Keys) {
		t.Errorf("fixed_window decided %d hits of %d keys, want %d of %d", fw.Decisions, fw.Keys, tr.Hits, len(tr.Keys))
	}
	// The file's first key sends 3 hits at the end of second 0 and 3 at the
	// start of second 1: fixed_window admits all six, the exact limit three.
	if fw.Overshoot != 2 {
		t.Errorf("fixed_window overshoot %v on the trace, want 2", fw.Overshoot)
	}
	if sl := find(t, rs, "trace", "sliding_log"); sl.Overshoot != 1 || sl.FalseAccepts != 0 {
		t.Errorf("sliding_log overshoot %v, false accepts %d; want 1, 0", sl.Overshoot, sl.FalseAccepts)
	}
}

func FuzzParseTrace(f *testing.F) {
	f.Add([]byte("time,key,cost\n1.5,alice,2\n1,bob\n"))
	f.Add([]byte(`{"time":"2026-01-01T00:00:00Z","key":"a","cost":1}` + "\n"))
	f.Add([]byte(`{"time":1.25,"key":"a"}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		tr, err := ParseTrace("fuzz", bytes.NewReader(in))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz") {
				t.Errorf("error %q does not name the file", err)
			}
			return
		}
		n := 0
		for i, ev := range tr.Events {
			if len(ev) == 0 {
				t.Fatalf("key %q has no hits", tr.Keys[i])
			}
			for j, e := range ev {
				if e.At < 0 || e.At > tr.Span || e.Cost < 0 || e.Cost > MaxTraceCost {
					t.Fatalf("bad event %+v (span %d)", e, tr.Span)
				}
				if j > 0 && e.At < ev[j-1].At {
					t.Fatalf("events of %q out of order", tr.Keys[i])
				}
			}
			n += len(ev)
		}
		if n != tr.Hits || len(tr.Keys) != len(tr.Events) {
			t.Fatalf("hits %d, counted %d; keys %d, streams %d", tr.Hits, n, len(tr.Keys), len(tr.Events))
		}
	})
}
