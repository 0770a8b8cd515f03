package edge

import (
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/headers"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
)

func TestDecision(t *testing.T) {
	perMin := &service.CurrentLimit{RequestsPerUnit: 20, Unit: "minute", Window: time.Minute}
	ok := func(rem int64, reset time.Duration) service.Status {
		return service.Status{Code: service.CodeOK, CurrentLimit: perMin, Rule: &rules.Rule{ID: "ok"},
			Result: sluice.Result{Allowed: true, Limit: 20, Remaining: rem, ResetAfter: reset}}
	}
	limited := service.Status{Code: service.CodeOverLimit, CurrentLimit: perMin, Rule: &rules.Rule{Name: "lim"},
		Result: sluice.Result{Reason: sluice.ReasonLimited, Limit: 20, ResetAfter: 50 * time.Second, RetryAfter: 2500 * time.Millisecond}}
	tooHigh := service.Status{Code: service.CodeOverLimit, CurrentLimit: perMin, Rule: &rules.Rule{Name: "big"},
		Result: sluice.Result{Reason: sluice.ReasonCostTooHigh, Limit: 20, Remaining: 7, ResetAfter: 40 * time.Second}}
	penalty := service.Status{Code: service.CodeOverLimit, CurrentLimit: perMin, Rule: &rules.Rule{Name: "box"},
		Result: sluice.Result{Reason: service.ReasonPenalty, Limit: 20, ResetAfter: 400 * time.Second, RetryAfter: 399500 * time.Millisecond}}
	denied := service.Status{Code: service.CodeOverLimit, Result: sluice.Result{Reason: service.ReasonDenyList}}
	closed := service.Status{Code: service.CodeOverLimit, CurrentLimit: perMin, Rule: &rules.Rule{ID: "strict"}, Degraded: service.FailedClosed}
	shadow := service.Status{Code: service.CodeOK, Shadowed: true, CurrentLimit: perMin, Rule: &rules.Rule{ID: "trial", ShadowMode: true},
		Result: sluice.Result{Reason: sluice.ReasonLimited, Limit: 20}}
	passed := limited
	passed.PassedOver = true
	tests := []struct {
		name       string
		statuses   []service.Status
		status     int
		reason     string
		retryAfter int64
		limits     []headers.ServiceLimit
		violated   []string
	}{
		{"allowed", []service.Status{ok(5, 10*time.Second), shadow}, 0, "", 0,
			[]headers.ServiceLimit{{Name: "ok", Remaining: 5, Reset: 10}}, nil},
		{"limited: t and Retry-After are when it would pass", []service.Status{ok(5, 10*time.Second), limited}, 429, headers.ReasonLimited, 3,
			[]headers.ServiceLimit{{Name: "ok", Remaining: 5, Reset: 10}, {Name: "lim", Remaining: 0, Reset: 3}}, []string{"lim"}},
		{"cost too high wins: no Retry-After", []service.Status{limited, tooHigh}, 429, headers.ReasonCostTooHigh, 0,
			[]headers.ServiceLimit{{Name: "lim", Remaining: 0, Reset: 3}, {Name: "big", Remaining: 7, Reset: 40}}, []string{"lim", "big"}},
		{"penalty: Retry-After is its end", []service.Status{ok(5, 10*time.Second), penalty}, 429, headers.ReasonPenalty, 400,
			[]headers.ServiceLimit{{Name: "ok", Remaining: 5, Reset: 10}, {Name: "box", Remaining: 0, Reset: 400}}, []string{"box"}},
		{"penalty beside a plain refusal", []service.Status{limited, penalty}, 429, headers.ReasonPenalty, 400,
			[]headers.ServiceLimit{{Name: "lim", Remaining: 0, Reset: 3}, {Name: "box", Remaining: 0, Reset: 400}}, []string{"lim", "box"}},
		{"deny list: no Retry-After", []service.Status{ok(5, 10*time.Second), denied}, 429, headers.ReasonDenyList, 0,
			[]headers.ServiceLimit{{Name: "ok", Remaining: 5, Reset: 10}}, []string{"deny_list"}},
		{"store down, fails closed: 503", []service.Status{ok(1, time.Second), closed}, 503, headers.ReasonUnavailable, 1,
			[]headers.ServiceLimit{{Name: "ok", Remaining: 1, Reset: 1}}, nil},
		{"an alternative passed over is not advertised", []service.Status{ok(5, 10*time.Second), passed}, 0, "", 0,
			[]headers.ServiceLimit{{Name: "ok", Remaining: 5, Reset: 10}}, nil},
		{"a refusal beats a store that is down", []service.Status{closed, limited}, 429, headers.ReasonLimited, 3,
			[]headers.ServiceLimit{{Name: "lim", Remaining: 0, Reset: 3}}, []string{"lim"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d Decision
			d.Add(&service.Response{Statuses: tt.statuses})
			if d.Status != tt.status || d.Reason != tt.reason || d.RetryAfter != tt.retryAfter {
				t.Errorf("status %d reason %q Retry-After %d, want %d %q %d", d.Status, d.Reason, d.RetryAfter, tt.status, tt.reason, tt.retryAfter)
			}
			if !reflect.DeepEqual(d.Limits, tt.limits) || !reflect.DeepEqual(d.Violated, tt.violated) {
				t.Errorf("limits %+v violated %q, want %+v %q", d.Limits, d.Violated, tt.limits, tt.violated)
			}
			h := http.Header{}
			d.Write(h)
			if got, want := h.Get(headers.SluiceReason), map[bool]string{true: tt.reason}[tt.reason == headers.ReasonPenalty || tt.reason == headers.ReasonDenyList]; got != want {
				t.Errorf("%s field %q, want %q", headers.SluiceReason, got, want)
			}
			if got := h.Get(headers.RetryAfter) != ""; got != (tt.retryAfter > 0) {
				t.Errorf("Retry-After field %q, want one: %v", h.Get(headers.RetryAfter), tt.retryAfter > 0)
			}
			if tt.status != 0 {
				if p := d.Problem(""); p.Status != tt.status || p.Reason != tt.reason {
					t.Errorf("problem %+v, want status %d reason %q", p, tt.status, tt.reason)
				}
			}
			d.Reset()
			if d.Status != 0 || len(d.Limits) != 0 || d.Legacy != nil {
				t.Errorf("after Reset: %+v, want empty", d)
			}
		})
	}
}

// TestBucketPolicyPublishesTheRate: for a bucket algorithm Result.Limit is
// the burst; RateLimit-Policy then names the window in which the rate
// refills the burst, so that q ÷ w is the rate, not the burst per the
// rate's window (which a generic client would read as the rate).
func TestBucketPolicyPublishesTheRate(t *testing.T) {
	perMin10 := &service.CurrentLimit{RequestsPerUnit: 10, Unit: "minute", Window: time.Minute}
	for _, tc := range []struct {
		name  string
		alg   sluice.Algorithm
		burst int64
		want  string
	}{
		{"token_bucket burst 50", sluice.TokenBucket, 50, `"b";q=50;w=300`},
		{"gcra burst 15", sluice.GCRA, 15, `"b";q=15;w=90`},
		{"leaky_bucket burst 1", sluice.LeakyBucket, 1, `"b";q=1;w=6`},
		{"gcra without burst", sluice.GCRA, 10, `"b";q=10;w=60`},
		{"fixed_window", sluice.FixedWindow, 10, `"b";q=10;w=60`},
	} {
		st := service.Status{Code: service.CodeOK, CurrentLimit: perMin10,
			Rule:   &rules.Rule{ID: "b", Limit: sluice.Limit{Algorithm: tc.alg, Quota: 10, Window: time.Minute, Burst: tc.burst}},
			Result: sluice.Result{Allowed: true, Limit: tc.burst, Remaining: tc.burst - 1, ResetAfter: time.Second}}
		var d Decision
		d.Add(&service.Response{OverallCode: service.CodeOK, Statuses: []service.Status{st}})
		h := http.Header{}
		d.Write(h)
		if got := h.Get("RateLimit-Policy"); got != tc.want {
			t.Errorf("%s: RateLimit-Policy %q, want %q", tc.name, got, tc.want)
		}
	}
}
