package rules

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
)

// specOf decodes the same limit written in YAML and in JSON, failing the
// test if either decoder refuses it.
func specOf(t *testing.T, yml, js string) (y, j *Spec) {
	t.Helper()
	y, err := DecodeSpecYAML("t.yaml", []byte(yml))
	if err != nil {
		t.Fatalf("DecodeSpecYAML(%q): %v", yml, err)
	}
	j, err = DecodeSpecJSON([]byte(js), "limit")
	if err != nil {
		t.Fatalf("DecodeSpecJSON(%s): %v", js, err)
	}
	return y, j
}

// written is a Spec without where it was written (lines), for comparing
// a YAML decoding with a JSON one.
func written(s *Spec) Spec {
	c := *s
	c.Line, c.lines, c.replLines, c.usageLines = 0, [numFields]int{}, nil, nil
	if s.Tiers != nil {
		c.Tiers = map[string]*Spec{}
		for k, v := range s.Tiers {
			w := written(v)
			c.Tiers[k] = &w
		}
	}
	return c
}

// TestSpecYAMLAndJSON: one limit written in a rule file's YAML and in JSON
// decodes to the same Spec, and the one validator says the same of both:
// the same rule, or the same problems, each naming its field (with its
// line for YAML, its JSON path for JSON).
func TestSpecYAMLAndJSON(t *testing.T) {
	tests := []struct {
		name     string
		yaml     string
		json     string
		use      Use
		wantLim  sluice.Limit // when valid
		wantErrs []string     // "line|field: msg", JSON's field prefixed "limit."
	}{
		{name: "token bucket", yaml: "unit: minute\nrequests_per_unit: 100\nalgorithm: token_bucket\nburst: 10\n",
			json:    `{"unit":"minute","requests_per_unit":100,"algorithm":"token_bucket","burst":10}`,
			wantLim: sluice.Limit{Algorithm: sluice.TokenBucket, Quota: 100, Window: time.Minute, Burst: 10}},
		{name: "zero quota is given", yaml: "window: 90s\nrequests_per_unit: 0\n", json: `{"window":"90s","requests_per_unit":0}`,
			wantLim: sluice.Limit{Algorithm: sluice.FixedWindow, Window: 90 * time.Second}},
		{name: "unknown unit", yaml: "requests_per_unit: 1\nunit: fortnight\n", json: `{"requests_per_unit":1,"unit":"fortnight"}`,
			wantErrs: []string{`2|unit: unknown unit "fortnight" (want one of ` + unitList + ")"}},
		{name: "negative quota", yaml: "unit: second\nrequests_per_unit: -1\n", json: `{"unit":"second","requests_per_unit":-1}`,
			wantErrs: []string{`2|requests_per_unit: want a whole number from 0 to 4294967295, got "-1"`}},
		{name: "burst without bucket", yaml: "unit: second\nrequests_per_unit: 5\nburst: 9\n", json: `{"unit":"second","requests_per_unit":5,"burst":9}`,
			wantErrs: []string{"3|burst: fixed_window has no burst; remove it or use token_bucket, gcra or leaky_bucket"}},
		{name: "unit and window", yaml: "unit: second\nwindow: 2s\nrequests_per_unit: 5\n", json: `{"unit":"second","window":"2s","requests_per_unit":5}`,
			wantErrs: []string{"2|window: give unit or window, not both"}},
		{name: "no quota", yaml: "unit: second\n", json: `{"unit":"second"}`,
			wantErrs: []string{"1|requests_per_unit: required (0 denies every request)"}},
		{name: "unlimited with a unit", yaml: "unlimited: true\nunit: second\n", json: `{"unlimited":true,"unit":"second"}`,
			wantErrs: []string{"2|unit: not allowed with unlimited: true"}},
		{name: "replaces itself", yaml: "name: a\nunit: second\nrequests_per_unit: 1\nreplaces:\n- name: b\n- name: a\n",
			json:     `{"name":"a","unit":"second","requests_per_unit":1,"replaces":[{"name":"b"},{"name":"a"}]}`,
			wantErrs: []string{`6|replaces[1].name: names this rule itself ("a"); a rule cannot replace itself`}},
		{name: "calendar with a unit", yaml: "calendar: month\nunit: day\nrequests_per_unit: 1\n", json: `{"calendar":"month","unit":"day","requests_per_unit":1}`,
			wantErrs: []string{"2|unit: not allowed with calendar (the period is the window)"}},
		{name: "reserve without settle: reserve", yaml: "unit: hour\nrequests_per_unit: 1000\nreserve: 500\nsettle_within: 90s\n",
			json:     `{"unit":"hour","requests_per_unit":1000,"reserve":500,"settle_within":"90s"}`,
			wantErrs: []string{"3|reserve: only with settle: reserve", "4|settle_within: only with settle: reserve"}},
		{name: "penalty on concurrency", yaml: "unit: second\nrequests_per_unit: 1\nalgorithm: concurrency\npenalty: 1m\n",
			json:     `{"unit":"second","requests_per_unit":1,"algorithm":"concurrency","penalty":"1m"}`,
			wantErrs: []string{"4|penalty: not allowed with algorithm concurrency (a slot is given back, not exceeded)"}},
		{name: "a tier's unit", yaml: "unit: second\nrequests_per_unit: 1\ntiers:\n  pro:\n    requests_per_unit: 5\n    unit: fortnight\n",
			json:     `{"unit":"second","requests_per_unit":1,"tiers":{"pro":{"requests_per_unit":5,"unit":"fortnight"}}}`,
			wantErrs: []string{`6|tiers.pro.unit: unknown unit "fortnight" (want one of ` + unitList + ")"}},
		{name: "a request's limit takes no algorithm", yaml: "unit: second\nrequests_per_unit: 1\nalgorithm: gcra\n",
			json:     `{"unit":"second","requests_per_unit":1,"algorithm":"gcra"}`,
			use:      Use{What: "a request's limit", Allowed: FieldRequestsPerUnit | FieldUnit, RequireWindow: true},
			wantErrs: []string{"3|algorithm: not allowed in a request's limit (want only unit, requests_per_unit)"}},
		{name: "choice", yaml: "unit: minute\nrequests_per_unit: 3\nchoice: model\n", json: `{"unit":"minute","requests_per_unit":3,"choice":"model"}`,
			wantLim: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 3, Window: time.Minute}},
		{name: "choice not a name", yaml: "unit: minute\nrequests_per_unit: 3\nchoice: a b\n", json: `{"unit":"minute","requests_per_unit":3,"choice":"a b"}`,
			wantErrs: []string{`3|choice: want a group name: a lowercase letter, then up to 63 lowercase letters, digits, '_', '-' or '.', got "a b"`}},
		{name: "money budget", yaml: "usage:\n  model: m\n  output: o\nbudget: 2.5\ncalendar: day\nsettle: after\n",
			json:    `{"usage":{"model":"m","output":"o"},"budget":"2.5","calendar":"day","settle":"after"}`,
			use:     Use{Path: []Step{{Key: "k", Kind: MatchAny}, {Key: "m", Kind: MatchAny}, {Key: "o", Kind: MatchAny}}},
			wantLim: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 2_500_000, Window: 25 * time.Hour}},
		{name: "money usage off the path", yaml: "usage:\n  model: m\n  input: i\nbudget: \"1\"\nunit: day\nsettle: after\n",
			json:     `{"usage":{"model":"m","input":"i"},"budget":"1","unit":"day","settle":"after"}`,
			use:      Use{Path: []Step{{Key: "m", Kind: MatchAny}}},
			wantErrs: []string{`3|usage.input: key "i" is not on this rule's path (m)`}},
		{name: "notify_at", yaml: "unit: day\nrequests_per_unit: 100\nnotify_at: [50, 80, 100]\n",
			json:    `{"unit":"day","requests_per_unit":100,"notify_at":[50,80,100]}`,
			wantLim: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 100, Window: 24 * time.Hour}},
		{name: "notify_at out of order", yaml: "unit: day\nrequests_per_unit: 100\nnotify_at: [80, 80]\n",
			json:     `{"unit":"day","requests_per_unit":100,"notify_at":[80,80]}`,
			wantErrs: []string{"3|notify_at: level 2: 80 after 80; want the levels strictly increasing"}},
		{name: "a request's limit", yaml: "unit: hour\nrequests_per_unit: 7\n", json: `{"unit":"hour","requests_per_unit":7}`,
			use:     Use{What: "a request's limit", Allowed: FieldRequestsPerUnit | FieldUnit, RequireWindow: true},
			wantLim: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 7, Window: time.Hour}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			y, j := specOf(t, tt.yaml, tt.json)
			if wy, wj := written(y), written(j); !reflect.DeepEqual(wy, wj) {
				t.Fatalf("YAML decodes to %+v, JSON to %+v; want the same Spec", wy, wj)
			}
			var ylim, jlim sluice.Limit
			var yerr, jerr error
			if tt.use.Allowed != 0 {
				var yl, jl *TierLimit
				yl, yerr = y.TierLimit(tt.use)
				jl, jerr = j.TierLimit(tt.use)
				if yl != nil && jl != nil {
					ylim, jlim = yl.Limit, jl.Limit
				}
			} else {
				var yr, jr *Rule
				yr, yerr = y.Rule(tt.use)
				jr, jerr = j.Rule(tt.use)
				if yr != nil && jr != nil {
					ylim, jlim = yr.Limit, jr.Limit
				}
			}
			if tt.wantErrs == nil {
				if yerr != nil || jerr != nil {
					t.Fatalf("YAML: %v; JSON: %v; want both valid", yerr, jerr)
				}
				if ylim != tt.wantLim || jlim != tt.wantLim {
					t.Errorf("limits: YAML %+v, JSON %+v; want %+v", ylim, jlim, tt.wantLim)
				}
				return
			}
			var ye, je SpecErrors
			if !errors.As(yerr, &ye) || !errors.As(jerr, &je) {
				t.Fatalf("YAML: %v; JSON: %v; want SpecErrors from both", yerr, jerr)
			}
			var gotY, gotJ []string
			for _, e := range ye {
				gotY = append(gotY, fmt.Sprintf("%d|%s", e.Line, e.Error()))
			}
			for _, e := range je.At("limit") {
				gotJ = append(gotJ, e.Error())
			}
			var wantJ []string
			for _, w := range tt.wantErrs {
				_, rest, _ := strings.Cut(w, "|")
				wantJ = append(wantJ, "limit."+rest)
			}
			if !reflect.DeepEqual(gotY, tt.wantErrs) {
				t.Errorf("YAML errors %q, want %q", gotY, tt.wantErrs)
			}
			if !reflect.DeepEqual(gotJ, wantJ) {
				t.Errorf("JSON errors %q, want %q", gotJ, wantJ)
			}
		})
	}
}

// TestSpecDecodeErrors: each decoder refuses what is not a Spec, naming
// the field by line (YAML) or JSON path.
func TestSpecDecodeErrors(t *testing.T) {
	if _, err := DecodeSpecYAML("t.yaml", []byte("unit: second\nburst: [1]\ncolour: red\n")); err == nil ||
		!strings.Contains(err.Error(), "t.yaml:2: burst: want a whole number") || !strings.Contains(err.Error(), "t.yaml:3: colour: unknown key") {
		t.Errorf("DecodeSpecYAML = %v, want burst's type at line 2 and colour unknown at line 3", err)
	}
	_, err := DecodeSpecJSON([]byte(`{"unit":"second","colour":"red","tiers":{"pro":{"burst":"x"}}}`), "quotas[2].limit")
	if err == nil || !strings.Contains(err.Error(), "quotas[2].limit.colour: unknown field") || !strings.Contains(err.Error(), "quotas[2].limit.tiers.pro.burst") {
		t.Errorf("DecodeSpecJSON = %v, want colour unknown and tiers.pro.burst's type, at quotas[2].limit", err)
	}
	s, err := DecodeSpecJSON([]byte(`{"unit":"second","requests_per_unit":1,"tiers":{"pro":null}}`), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Rule(Use{}); err == nil || err.Error() != "tiers.pro: want a mapping, got nothing" {
		t.Errorf("a null tier: %v, want tiers.pro: want a mapping, got nothing (as YAML's pro: with no value)", err)
	}
	if _, err := DecodeSpecYAML("t.yaml", []byte("unit: second\nrequests_per_unit: 1\ntiers:\n  pro:\n")); err == nil || !strings.Contains(err.Error(), "t.yaml:4: tiers.pro: want a mapping, got nothing") {
		t.Errorf("YAML's null tier: %v, want t.yaml:4: tiers.pro: want a mapping, got nothing", err)
	}
}

// notify_at compiles into Rule.NotifyAt, on every algorithm that counts
// what a period used, calendar quotas included.
func TestNotifyAtCompiles(t *testing.T) {
	for _, tc := range []struct{ yaml string }{
		{"unit: day\nrequests_per_unit: 100\nnotify_at: [50, 80, 100]\n"},
		{"calendar: month\nrequests_per_unit: 100\nnotify_at: [50, 80, 100]\n"},
		{"unit: day\nrequests_per_unit: 100\nalgorithm: token_bucket\nnotify_at: [50, 80, 100]\n"},
		{"unit: day\nrequests_per_unit: 100\nalgorithm: sliding_window\nnotify_at: [50, 80, 100]\n"},
		{"unit: day\nrequests_per_unit: 100\nalgorithm: gcra\nnotify_at: [50, 80, 100]\n"},
	} {
		y, _ := specOf(t, tc.yaml, "{}")
		r, err := y.Rule(Use{})
		if err != nil {
			t.Errorf("%q: %v", tc.yaml, err)
			continue
		}
		if want := []uint8{50, 80, 100}; !slices.Equal(r.NotifyAt, want) {
			t.Errorf("%q: NotifyAt = %v, want %v", tc.yaml, r.NotifyAt, want)
		}
	}
}
