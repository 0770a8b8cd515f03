package rls

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
)

// TestResponseHeaders: response_headers_to_add are edge.Decision's fields,
// every advertised policy in request order, Retry-After when refused.
func TestResponseHeaders(t *testing.T) {
	perSec := &service.CurrentLimit{Name: `per "ip"`, RequestsPerUnit: 10, Unit: "second", Window: time.Second}
	perMin := &service.CurrentLimit{RequestsPerUnit: 20, Unit: "minute", Window: time.Minute}
	type kv struct{ k, v string }
	tests := []struct {
		name string
		in   service.Response
		want []kv
	}{
		{"no limits", service.Response{OverallCode: service.CodeOK, Statuses: []service.Status{{Code: service.CodeOK}, {Code: service.CodeOK, Unlimited: true}}}, nil},
		{"every policy, names quoted", service.Response{OverallCode: service.CodeOK, Statuses: []service.Status{
			{Code: service.CodeOK, CurrentLimit: perMin, Rule: &rules.Rule{ID: "a.b"}, Result: sluice.Result{Allowed: true, Limit: 20, Remaining: 3, ResetAfter: 10 * time.Second}},
			{Code: service.CodeOK, CurrentLimit: perSec, Result: sluice.Result{Allowed: true, Limit: 10, Remaining: 9, ResetAfter: time.Second}},
		}}, []kv{{"RateLimit-Policy", `"a.b";q=20;w=60, "per \"ip\"";q=10;w=1`}, {"RateLimit", `"a.b";r=3;t=10, "per \"ip\"";r=9;t=1`}}},
		{"over limit, with Retry-After", service.Response{OverallCode: service.CodeOverLimit, Statuses: []service.Status{
			{Code: service.CodeOK, CurrentLimit: perMin, Result: sluice.Result{Allowed: true, Limit: 20, Remaining: 0, ResetAfter: 10 * time.Second}},
			{Code: service.CodeOverLimit, CurrentLimit: perSec, Result: sluice.Result{Limit: 10, Remaining: 0, ResetAfter: 900 * time.Millisecond, RetryAfter: 100 * time.Millisecond, Reason: sluice.ReasonLimited}},
		}}, []kv{{"RateLimit-Policy", `"per_minute";q=20;w=60, "per \"ip\"";q=10;w=1`}, {"RateLimit", `"per_minute";r=0;t=10, "per \"ip\"";r=0;t=1`}, {"Retry-After", "1"}}},
		{"cost too high: no Retry-After", service.Response{OverallCode: service.CodeOverLimit, Statuses: []service.Status{
			{Code: service.CodeOverLimit, CurrentLimit: perMin, Result: sluice.Result{Limit: 20, Remaining: 2, ResetAfter: 90 * time.Second, Reason: sluice.ReasonCostTooHigh}},
		}}, []kv{{"RateLimit-Policy", `"per_minute";q=20;w=60`}, {"RateLimit", `"per_minute";r=2;t=90`}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := response(tt.in, true).ResponseHeadersToAdd
			if len(got) != len(tt.want) {
				t.Fatalf("response_headers_to_add = %v, want %v", got, tt.want)
			}
			for i, w := range tt.want {
				if got[i].GetKey() != w.k || got[i].GetValue() != w.v {
					t.Errorf("response_headers_to_add[%d] = %s: %s, want %s: %s", i, got[i].GetKey(), got[i].GetValue(), w.k, w.v)
				}
			}
			if n := len(response(tt.in, false).ResponseHeadersToAdd); n != 0 {
				t.Errorf("without headers: %d response_headers_to_add, want 0", n)
			}
		})
	}
}
