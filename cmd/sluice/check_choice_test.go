package main

import (
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-rl/sluice/server/api"
)

// TestCheckPrintsChoice: sluice check names the alternative a request was
// admitted with (first with quota), from the gRPC answer's dynamic
// metadata and from the HTTP answer, and marks the alternatives passed
// over or not tried.
func TestCheckPrintsChoice(t *testing.T) {
	const want = "  chosen model: model=gpt-4o-mini (alternative 1, descriptor 2)\n"
	md, err := structpb.NewStruct(map[string]any{"sluice.choice": map[string]any{
		"model": map[string]any{"value": "gpt-4o-mini", "key": "model", "index": 1, "descriptor": 2}}})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	printDecision(&b, &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, DynamicMetadata: md})
	if !strings.HasSuffix(b.String(), want) {
		t.Errorf("gRPC answer printed:\n%s\nwant it to end with\n%s", b.String(), want)
	}
	b.Reset()
	printCheckResponse(&b, &api.CheckResponse{Code: "OK", Allowed: true,
		Statuses: []api.CheckStatus{{Code: "OK"}, {Code: "OVER_LIMIT", PassedOver: true}, {Code: "OK"}, {Code: "OK", Untried: true}},
		Choice:   map[string]api.ChoiceJSON{"model": {Value: "gpt-4o-mini", Key: "model", Index: 1, Descriptor: 2}}})
	for _, w := range []string{"descriptor 1: OVER_LIMIT", "passed over (another alternative decides)", "descriptor 3: OK", "untried alternative", want} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("HTTP answer printed:\n%s\nwant it to contain %q", b.String(), w)
		}
	}
}
