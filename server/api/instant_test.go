package api

import (
	"strconv"
	"testing"

	"github.com/sluice-rl/sluice/store/storetest"
)

// TestDecisionInstantHeader: with Options.DecisionInstant, a /v1/check the
// store decided carries Sluice-Decided-At, the store clock's reading (here
// the memory store's test clock, at storetest.Epoch); one no limit decided
// carries none, and without the option no answer does.
func TestDecisionInstantHeader(t *testing.T) {
	limited := `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"1.2.3.4"}]}]}`
	unmatched := `{"domain":"edge","descriptors":[{"entries":[{"key":"nope","value":"x"}]}]}`
	epoch := strconv.FormatInt(storetest.Epoch.UnixMicro(), 10)
	tests := []struct {
		name string
		on   bool
		body string
		want string
	}{
		{"on, decided by the store", true, limited, epoch},
		{"on, no limit matched", true, unmatched, ""},
		{"off", false, limited, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := New(Options{Checker: newEngine(t, nil), DecisionInstant: tt.on})
			if err != nil {
				t.Fatal(err)
			}
			code, hdr, out := do(t, h, "POST", "/v1/check", tt.body)
			if code != 200 {
				t.Fatalf("POST /v1/check = %d %s, want 200", code, out)
			}
			if got := hdr.Get("Sluice-Decided-At"); got != tt.want || DecidedAtHeader != "Sluice-Decided-At" {
				t.Errorf("%s = %q, want %q", DecidedAtHeader, got, tt.want)
			}
		})
	}
}
