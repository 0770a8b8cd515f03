// Package envoy holds an Envoy configuration that puts Sluice in front of an
// upstream; its test decodes the file strictly into Envoy's own types.
package envoy

import (
	"encoding/json"
	"os"
	"slices"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluice-rl/sluice/rules"
)

// TestEnvoyConfig: envoy.yaml is a valid Envoy bootstrap (unknown fields and
// failed field validations are errors), its rate-limit filter asks the
// domain the example rules define, and its route's descriptors match rules
// of that domain.
func TestEnvoyConfig(t *testing.T) {
	raw, err := os.ReadFile("envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("envoy.yaml: %v", err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &b); err != nil {
		t.Fatalf("envoy.yaml is not an Envoy bootstrap: %v", err)
	}
	if err := b.ValidateAll(); err != nil {
		t.Fatalf("envoy.yaml fails Envoy's field validation: %v", err)
	}
	var hcm hcmv3.HttpConnectionManager
	if err := b.StaticResources.Listeners[0].FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
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
