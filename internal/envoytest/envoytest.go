// Package envoytest reads the example Envoy configurations of the
// repository (examples/*/envoy.yaml) strictly into Envoy's own types, for
// the tests that check them: unknown fields and failed field validations
// are errors, as Envoy itself would refuse them.
package envoytest

import (
	"encoding/json"
	"os"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// Load decodes the Envoy bootstrap in the YAML file path and returns its
// first listener's HTTP connection manager; any problem fails t.
func Load(t testing.TB, path string) *hcmv3.HttpConnectionManager {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &b); err != nil {
		t.Fatalf("%s is not an Envoy bootstrap: %v", path, err)
	}
	if err := b.ValidateAll(); err != nil {
		t.Fatalf("%s fails Envoy's field validation: %v", path, err)
	}
	var hcm hcmv3.HttpConnectionManager
	if err := b.StaticResources.Listeners[0].FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &hcm
}
