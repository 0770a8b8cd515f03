// Package envoy holds an Envoy configuration that puts Sluice in front of an
// upstream; its test decodes the file strictly into Envoy's own types.
package envoy

import (
	"slices"
	"testing"

	"github.com/sluice-rl/sluice/internal/envoytest"
	"github.com/sluice-rl/sluice/rules"
)

// TestEnvoyConfig: envoy.yaml is a valid Envoy bootstrap (unknown fields and
// failed field validations are errors), its rate-limit filter asks the
// domain the example rules define, and its route's descriptors match rules
// of that domain.
func TestEnvoyConfig(t *testing.T) {
	hcm := envoytest.Load(t, "envoy.yaml")
	var names []string
	for _, f := range hcm.HttpFilters {
		names = append(names, f.Name)
	}
	if want := []string{"envoy.filters.http.ratelimit", "envoy.filters.http.router"}; !slices.Equal(names, want) {
		t.Errorf("http filters = %v, want %v", names, want)
	}
	snap, err := rules.LoadDir("../rules", rules.Options{})
	if err != nil {
		t.Fatalf("example rules: %v", err)
	}
	// The descriptors the route's actions build, with sample values.
	for _, d := range [][]rules.Entry{
		{{Key: "remote_address", Value: "192.0.2.1"}},
		{{Key: "tenant", Value: "acme"}, {Key: "user", Value: "alice"}},
	} {
		if snap.Match("edge", d) == nil {
			t.Errorf("descriptor %v matches no rule of domain edge in examples/rules", d)
		}
	}
}
