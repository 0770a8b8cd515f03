package rules

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParseRules feeds arbitrary bytes to Parse: it must never panic, must
// return either a snapshot or an Errors naming the file, and every rule it
// accepts must be usable (a valid limit, reachable by Match).
func FuzzParseRules(f *testing.F) {
	for _, pattern := range []string{"testdata/bad/*.yaml", "testdata/good/*.y*ml", "../examples/rules/*.yaml"} {
		files, _ := filepath.Glob(pattern)
		for _, file := range files {
			if data, err := os.ReadFile(file); err == nil {
				f.Add(data)
			}
		}
	}
	// Nested input: descriptors at and past MaxDescriptorDepth, aliases
	// that expand, nested metadata, nested lists.
	for _, s := range []string{
		"domain: d\ndescriptors: [" + chain(1, MaxDescriptorDepth, true) + "]\n",
		"domain: d\ndescriptors: [" + chain(1, MaxDescriptorDepth+1, false) + "]\n",
		aliasBomb(3, 3),
		"domain: d\ndescriptors: [{key: k, metadata: {a: {b: {c: [1, [2, [3, {d: e}]]]}}}, rate_limit: {unit: second, requests_per_unit: 1}}]\n",
		"domain: d\ndescriptors: " + strings.Repeat("[", 64) + strings.Repeat("]", 64) + "\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		snap, err := Parse("fuzz.yaml", data, Options{})
		if err != nil {
			var errs Errors
			if !errors.As(err, &errs) || len(errs) == 0 {
				t.Fatalf("error %T %v, want a non-empty Errors", err, err)
			}
			for _, p := range errs {
				if p.File != "fuzz.yaml" || p.Msg == "" || !strings.HasPrefix(p.Error(), "fuzz.yaml") {
					t.Fatalf("problem %+v must name the file and say something", p)
				}
			}
			if snap != nil {
				t.Fatal("a snapshot returned along with errors")
			}
			return
		}
		for _, r := range snap.Rules() {
			if !r.Unlimited {
				if verr := r.Limit.Validate(); verr != nil {
					t.Fatalf("rule %s accepted with an invalid limit %v: %v", r.ID, r.Limit, verr)
				}
			}
			// A rule whose path is all exact values is what Match returns
			// for those values: exact matches always win.
			entries := make([]Entry, len(r.Path))
			exact := true
			for i, st := range r.Path {
				exact = exact && st.Kind == MatchExact
				entries[i] = Entry{Key: st.Key, Value: st.Value}
			}
			if got := snap.Match(r.Domain, entries); exact && got != r {
				t.Fatalf("rule %s is not reachable: Match(%v) = %v", r.ID, entries, got)
			}
		}
	})
}

// FuzzDecodeSpec feeds arbitrary bytes to both Spec decoders and the
// validator: nothing may panic, a refusal must say something, and a limit
// the validator accepts must be a valid sluice.Limit.
func FuzzDecodeSpec(f *testing.F) {
	for _, s := range []string{
		"unit: minute\nrequests_per_unit: 100\nalgorithm: token_bucket\nburst: 10\n",
		`{"unit":"minute","requests_per_unit":100,"tiers":{"pro":{"requests_per_unit":1000,"window":"90s"}}}`,
		`{"calendar":"month","time_zone":"Europe/Berlin","requests_per_unit":-1,"replaces":[{"name":""}]}`,
		"unlimited: yes\nunit: [a]\ntiers: {gold: {}}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, decode := range []func([]byte) (*Spec, error){
			func(b []byte) (*Spec, error) { return DecodeSpecYAML("fuzz.yaml", b) },
			func(b []byte) (*Spec, error) { return DecodeSpecJSON(b, "limit") },
		} {
			s, err := decode(data)
			if err != nil {
				if err.Error() == "" {
					t.Fatalf("a refusal that says nothing: %#v", err)
				}
				continue
			}
			r, err := s.Rule(Use{})
			if err != nil {
				var se SpecErrors
				if !errors.As(err, &se) || len(se) == 0 {
					t.Fatalf("Rule error %T %v, want SpecErrors", err, err)
				}
				continue
			}
			if !r.Unlimited {
				if err := r.Limit.Validate(); err != nil {
					t.Fatalf("Spec %+v accepted with an invalid limit %v: %v", s, r.Limit, err)
				}
			}
		}
	})
}
