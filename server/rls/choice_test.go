package rls

import (
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/storetest"
)

// choiceRules: a key's own limit beside per-model limits of choice group
// "model" (gpt-4o 1 per minute, any other model 2).
const choiceRules = `domain: llm
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: model
        value: gpt-4o
        rate_limit: {unit: minute, requests_per_unit: 1, choice: model}
      - key: model
        rate_limit: {unit: minute, requests_per_unit: 2, choice: model}
`

// envoyChoice is what Envoy sends for a key whose route lists gpt-4o, then
// gpt-4o-mini: the key's descriptor and one per model, in route order.
func envoyChoice(key string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		desc("api_key", key), desc("api_key", key, "model", "gpt-4o"), desc("api_key", key, "model", "gpt-4o-mini"),
	}}
}

// chosen reads the choice of group "model" from a response's
// dynamic_metadata: the value and index, ok false when there is none.
func chosen(resp *rlsv3.RateLimitResponse) (value string, index float64, ok bool) {
	g := resp.GetDynamicMetadata().GetFields()["sluice.choice"].GetStructValue().GetFields()["model"].GetStructValue()
	if g == nil {
		return "", 0, false
	}
	f := g.GetFields()
	return f["value"].GetStringValue(), f["index"].GetNumberValue(), true
}

// TestChoiceGRPC: first with quota over a real gRPC server (the server's
// own codec), on memory and Redis (single and Cluster), with and without
// Options.DynamicMetadata: the dynamic metadata names the model the
// request was admitted with, gpt-4o while it has quota, then gpt-4o-mini,
// then none (denied, each model's status OVER_LIMIT).
func TestChoiceGRPC(t *testing.T) {
	stores(t, func(t *testing.T, st sluice.Store, _ *storetest.Clock) {
		for _, md := range []bool{false, true} {
			c := serveYAML(t, choiceRules, st, Options{DynamicMetadata: md})
			key := "plain"
			if md {
				key = "md"
			}
			want := []struct {
				value  string
				index  float64
				code   rlsv3.RateLimitResponse_Code
				status []rlsv3.RateLimitResponse_Code
			}{
				{"gpt-4o", 0, rlsv3.RateLimitResponse_OK, []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK}},
				{"gpt-4o-mini", 1, rlsv3.RateLimitResponse_OK, []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT, rlsv3.RateLimitResponse_OK}},
				{"gpt-4o-mini", 1, rlsv3.RateLimitResponse_OK, []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT, rlsv3.RateLimitResponse_OK}},
				{"", 0, rlsv3.RateLimitResponse_OVER_LIMIT, []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT, rlsv3.RateLimitResponse_OVER_LIMIT}},
			}
			for i, w := range want {
				resp := call(t, c, envoyChoice(key))
				value, index, ok := chosen(resp)
				if ok != (w.value != "") || value != w.value || index != w.index {
					t.Errorf("metadata %v, call %d: chose %q (index %v, %v), want %q (index %v)", md, i, value, index, ok, w.value, w.index)
				}
				if resp.GetOverallCode() != w.code {
					t.Errorf("metadata %v, call %d: %v, want %v", md, i, resp.GetOverallCode(), w.code)
				}
				for j, s := range resp.GetStatuses() {
					if s.GetCode() != w.status[j] {
						t.Errorf("metadata %v, call %d: status %d %v, want %v", md, i, j, s.GetCode(), w.status[j])
					}
				}
				if i == 0 && resp.GetStatuses()[2].GetCurrentLimit() != nil {
					t.Errorf("metadata %v: the untried gpt-4o-mini has current_limit %v, want none", md, resp.GetStatuses()[2].GetCurrentLimit())
				}
				if got := resp.GetDynamicMetadata().GetFields()["domain"]; md != (got != nil) {
					t.Errorf("metadata %v, call %d: envoyproxy/ratelimit's domain field %v", md, i, got)
				}
			}
			// One descriptor, one alternative (the codec's one-status
			// path): named too.
			one := &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("api_key", key+"-one", "model", "gpt-4o")}}
			if value, index, ok := chosen(call(t, c, one)); !ok || value != "gpt-4o" || index != 0 {
				t.Errorf("metadata %v: one alternative: chose %q (index %v, %v), want gpt-4o (0)", md, value, index, ok)
			}
			// A request without alternatives has no dynamic metadata
			// unless asked for.
			resp := call(t, c, &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("api_key", key)}})
			if m := resp.GetDynamicMetadata(); (m != nil) != md {
				t.Errorf("metadata %v: no alternatives, dynamic_metadata %v", md, m)
			}
			if _, ok := resp.GetDynamicMetadata().GetFields()["sluice.choice"]; ok {
				t.Errorf("no alternatives: a choice in %v", resp.GetDynamicMetadata())
			}
		}
	})
}
