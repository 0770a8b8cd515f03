package rlsproto

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
)

func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func TestFromProtoRejects(t *testing.T) {
	tests := []struct {
		name    string
		req     *rlsv3.RateLimitRequest
		wantMsg string
	}{
		{"nil request", nil, "domain: empty"},
		{"empty domain", &rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("a", "b")}}, "domain: empty"},
		{"no descriptors", &rlsv3.RateLimitRequest{Domain: "edge"}, "descriptors: none given"},
		{"unknown override unit", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: desc("a", "b").Entries,
			Limit:   &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3},
		}}}, "descriptors[0].limit.unit"},
		{"override multiplier", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: desc("a", "b").Entries,
			Limit:   &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_SECOND, UnitMultiplier: wrapperspb.UInt32(5)},
		}}}, "descriptors[0].limit.unit_multiplier"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromProto(tt.req)
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("FromProto error = %v, want one wrapping ErrInvalidRequest", err)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("FromProto error = %q, want it to contain %q", err, tt.wantMsg)
			}
		})
	}
}

// Descriptors envoyproxy/ratelimit answers OK (no entries, nil, an empty
// key) convert as they are; is_negative_hits becomes a refund, both ways.
func TestFromProtoEnvoyDescriptors(t *testing.T) {
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{}, nil, desc("a", "b", "", "c"), {Entries: desc("a", "b").Entries, IsNegativeHits: true, HitsAddend: wrapperspb.UInt64(3)}}}
	got, err := FromProto(req)
	if err != nil {
		t.Fatalf("FromProto = %v, want accepted", err)
	}
	if len(got.Descriptors) != 4 || len(got.Descriptors[0].Entries) != 0 || len(got.Descriptors[1].Entries) != 0 ||
		got.Descriptors[2].Entries[1].Key != "" || got.Descriptors[2].Refund || !got.Descriptors[3].Refund || *got.Descriptors[3].Hits != 3 {
		t.Fatalf("FromProto = %+v", got.Descriptors)
	}
	back, err := Request(got)
	if err != nil || !back.Descriptors[3].GetIsNegativeHits() || back.Descriptors[2].GetIsNegativeHits() {
		t.Fatalf("Request(FromProto) = %v, %v; want is_negative_hits on descriptor 3 only", back, err)
	}
}

func TestFromProto(t *testing.T) {
	five := uint64(5)
	zero := uint64(0)
	req := &rlsv3.RateLimitRequest{
		Domain:     "edge",
		HitsAddend: 3,
		Descriptors: []*ratelimitv3.RateLimitDescriptor{
			desc("remote_address", "1.2.3.4"),
			{Entries: desc("tenant", "acme", "user", "").Entries, HitsAddend: wrapperspb.UInt64(5)},
			{Entries: desc("k", "v").Entries, HitsAddend: wrapperspb.UInt64(0),
				Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 7, Unit: typev3.RateLimitUnit_MINUTE, UnitMultiplier: wrapperspb.UInt32(1)}},
		},
	}
	got, err := FromProto(req)
	if err != nil {
		t.Fatalf("FromProto: %v", err)
	}
	want := service.Request{Domain: "edge", Hits: 3, Descriptors: []service.Descriptor{
		{Entries: []rules.Entry{{Key: "remote_address", Value: "1.2.3.4"}}},
		{Entries: []rules.Entry{{Key: "tenant", Value: "acme"}, {Key: "user", Value: ""}}, Hits: &five},
		{Entries: []rules.Entry{{Key: "k", Value: "v"}}, Hits: &zero, Limit: &service.LimitOverride{RequestsPerUnit: 7, Unit: "minute"}},
	}}
	if got.Domain != want.Domain || got.Hits != want.Hits || len(got.Descriptors) != len(want.Descriptors) {
		t.Fatalf("FromProto = %+v, want %+v", got, want)
	}
	for i := range want.Descriptors {
		g, w := got.Descriptors[i], want.Descriptors[i]
		if len(g.Entries) != len(w.Entries) {
			t.Fatalf("descriptor %d entries = %v, want %v", i, g.Entries, w.Entries)
		}
		for j := range w.Entries {
			if g.Entries[j] != w.Entries[j] {
				t.Errorf("descriptor %d entry %d = %v, want %v", i, j, g.Entries[j], w.Entries[j])
			}
		}
		if (g.Hits == nil) != (w.Hits == nil) || (g.Hits != nil && *g.Hits != *w.Hits) {
			t.Errorf("descriptor %d hits = %v, want %v", i, g.Hits, w.Hits)
		}
		if (g.Limit == nil) != (w.Limit == nil) || (g.Limit != nil && *g.Limit != *w.Limit) {
			t.Errorf("descriptor %d limit = %v, want %v", i, g.Limit, w.Limit)
		}
	}
}

func TestCurrentLimitProto(t *testing.T) {
	S, M, H, D, W, MO := rlsv3.RateLimitResponse_RateLimit_SECOND, rlsv3.RateLimitResponse_RateLimit_MINUTE,
		rlsv3.RateLimitResponse_RateLimit_HOUR, rlsv3.RateLimitResponse_RateLimit_DAY,
		rlsv3.RateLimitResponse_RateLimit_WEEK, rlsv3.RateLimitResponse_RateLimit_MONTH
	tests := []struct {
		in       service.CurrentLimit
		wantRPU  uint32
		wantUnit rlsv3.RateLimitResponse_RateLimit_Unit
		wantMult uint32 // 0: absent
	}{
		{service.CurrentLimit{Name: "n", RequestsPerUnit: 10, Unit: "second", Window: time.Second}, 10, S, 0},
		{service.CurrentLimit{RequestsPerUnit: 10, Unit: "MINUTE", Window: time.Minute}, 10, M, 0},
		{service.CurrentLimit{RequestsPerUnit: 1, Unit: "month", Window: 30 * 24 * time.Hour}, 1, MO, 0},
		{service.CurrentLimit{RequestsPerUnit: 10, Window: 90 * time.Second}, 10, S, 90},
		{service.CurrentLimit{RequestsPerUnit: 10, Window: 2 * time.Hour}, 10, H, 2},
		{service.CurrentLimit{RequestsPerUnit: 10, Window: 120 * time.Second}, 10, M, 2},
		{service.CurrentLimit{RequestsPerUnit: 10, Window: 14 * 24 * time.Hour}, 10, W, 2},
		{service.CurrentLimit{RequestsPerUnit: 10, Window: 24 * time.Hour}, 10, D, 0},
		{service.CurrentLimit{RequestsPerUnit: 10, Window: 500 * time.Millisecond}, 20, S, 0},
		{service.CurrentLimit{RequestsPerUnit: 1, Window: 1500 * time.Millisecond}, 1, S, 0},
		{service.CurrentLimit{RequestsPerUnit: 3, Window: 2500 * time.Millisecond}, 1, S, 0},
	}
	for _, tt := range tests {
		got := CurrentLimitProto(&tt.in)
		var mult uint32
		if got.UnitMultiplier != nil {
			mult = got.UnitMultiplier.Value
		}
		if got.RequestsPerUnit != tt.wantRPU || got.Unit != tt.wantUnit || mult != tt.wantMult || got.Name != tt.in.Name {
			t.Errorf("CurrentLimitProto(%+v) = {rpu %d, unit %v, mult %d, name %q}, want {rpu %d, unit %v, mult %d, name %q}",
				tt.in, got.RequestsPerUnit, got.Unit, mult, got.Name, tt.wantRPU, tt.wantUnit, tt.wantMult, tt.in.Name)
		}
	}
	if CurrentLimitProto(nil) != nil {
		t.Errorf("CurrentLimitProto(nil) != nil")
	}
}

func TestToProto(t *testing.T) {
	perSec := &service.CurrentLimit{Name: "per_ip", RequestsPerUnit: 10, Unit: "second", Window: time.Second}
	perMin := &service.CurrentLimit{RequestsPerUnit: 20, Unit: "minute", Window: time.Minute}
	rule := &rules.Rule{ID: "remote_address"}
	tests := []struct {
		name string
		in   service.Response
		want *rlsv3.RateLimitResponse
	}{
		{
			name: "no rule matched",
			in:   service.Response{OverallCode: service.CodeOK, Statuses: []service.Status{{Code: service.CodeOK}}},
			want: &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: rlsv3.RateLimitResponse_OK}}},
		},
		{
			name: "unlimited",
			in:   service.Response{OverallCode: service.CodeOK, Statuses: []service.Status{{Code: service.CodeOK, Unlimited: true, Rule: rule}}},
			want: &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}}},
		},
		{
			name: "allowed and over limit, in order",
			in: service.Response{OverallCode: service.CodeOverLimit, Statuses: []service.Status{
				{Code: service.CodeOK, Rule: rule, CurrentLimit: perSec, Result: sluice.Result{Allowed: true, Limit: 10, Remaining: 7, ResetAfter: 300 * time.Millisecond}},
				{Code: service.CodeOverLimit, Rule: rule, CurrentLimit: perMin, Result: sluice.Result{Limit: 20, Remaining: 0, ResetAfter: 42*time.Second + 1, RetryAfter: 42 * time.Second}},
			}},
			want: &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
				{Code: rlsv3.RateLimitResponse_OK, CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{Name: "per_ip", RequestsPerUnit: 10, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND}, LimitRemaining: 7, DurationUntilReset: durationpb.New(time.Second)},
				{Code: rlsv3.RateLimitResponse_OVER_LIMIT, CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 20, Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE}, LimitRemaining: 0, DurationUntilReset: durationpb.New(42 * time.Second)}, // refused: when it would pass (RetryAfter)
			}},
		},
		{
			name: "shadowed",
			in: service.Response{OverallCode: service.CodeOK, Statuses: []service.Status{
				{Code: service.CodeOK, Shadowed: true, Rule: rule, CurrentLimit: perSec, Result: sluice.Result{Limit: 10, Remaining: 0, ResetAfter: time.Second}},
			}},
			want: &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
				{Code: rlsv3.RateLimitResponse_OK, CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{Name: "per_ip", RequestsPerUnit: 10, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND}, DurationUntilReset: durationpb.New(time.Second)},
			}},
		},
		{
			name: "degraded: store failed, reset is the window",
			in: service.Response{OverallCode: service.CodeOK, Statuses: []service.Status{
				{Code: service.CodeOK, Degraded: "failed_open", Rule: rule, CurrentLimit: perMin},
			}},
			want: &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
				{Code: rlsv3.RateLimitResponse_OK, CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 20, Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE}, DurationUntilReset: durationpb.New(time.Minute)},
			}},
		},
		{
			name: "sub-second window keeps exact reset",
			in: service.Response{OverallCode: service.CodeOK, Statuses: []service.Status{
				{Code: service.CodeOK, Rule: rule, CurrentLimit: &service.CurrentLimit{RequestsPerUnit: 5, Window: 100 * time.Millisecond}, Result: sluice.Result{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: 20 * time.Millisecond}},
			}},
			want: &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
				{Code: rlsv3.RateLimitResponse_OK, CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 50, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND}, LimitRemaining: 4, DurationUntilReset: durationpb.New(20 * time.Millisecond)},
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ToProto(tt.in)
			if !proto.Equal(got, tt.want) {
				t.Errorf("ToProto =\n  %v\nwant\n  %v", got, tt.want)
			}
		})
	}
}

func TestRequestConversion(t *testing.T) {
	hits := uint64(0)
	req := service.Request{Domain: "d", Hits: 3, Descriptors: []service.Descriptor{
		{Entries: []rules.Entry{{Key: "a", Value: "1"}, {Key: "b"}}, Hits: &hits},
		{Entries: []rules.Entry{{Key: "c", Value: "2"}}, Limit: &service.LimitOverride{RequestsPerUnit: 7, Unit: "Minute"}},
	}}
	out, err := Request(req)
	if err != nil {
		t.Fatal(err)
	}
	d0, d1 := out.Descriptors[0], out.Descriptors[1]
	if out.Domain != "d" || out.HitsAddend != 3 || len(d0.Entries) != 2 || d0.Entries[1].Key != "b" ||
		d0.HitsAddend == nil || d0.HitsAddend.Value != 0 || d1.Limit.GetRequestsPerUnit() != 7 || d1.Limit.GetUnit().String() != "MINUTE" {
		t.Errorf("Request(%+v) = %v", req, out)
	}
	bad := []service.Request{
		{Domain: "d", Hits: math.MaxUint32 + 1},
		{Domain: "d", Descriptors: []service.Descriptor{{Limit: &service.LimitOverride{RequestsPerUnit: 1, Unit: "fortnight"}}}},
		{Domain: "d", Descriptors: []service.Descriptor{{Limit: &service.LimitOverride{RequestsPerUnit: 1, Unit: "unknown"}}}},
	}
	for _, b := range bad {
		if _, err := Request(b); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("Request(%+v) error = %v, want ErrInvalidRequest", b, err)
		}
	}
}

func TestResponseConversion(t *testing.T) {
	in := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT,
		Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
			{Code: rlsv3.RateLimitResponse_OK},
			{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: math.MaxUint32},
			{Code: rlsv3.RateLimitResponse_OVER_LIMIT, LimitRemaining: 0, DurationUntilReset: durationpb.New(1500 * time.Millisecond),
				CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{Name: "n", RequestsPerUnit: 10, Unit: rlsv3.RateLimitResponse_RateLimit_HOUR}},
		},
	}
	out, err := Response(in, 3)
	if err != nil {
		t.Fatal(err)
	}
	s0, s1, s2 := out.Statuses[0], out.Statuses[1], out.Statuses[2]
	if out.OverallCode != service.CodeOverLimit || s0.CurrentLimit != nil || s0.Unlimited || !s1.Unlimited {
		t.Errorf("codes/unlimited wrong: %+v", out)
	}
	if s2.Code != service.CodeOverLimit || s2.CurrentLimit.Window != time.Hour || s2.CurrentLimit.Unit != "hour" ||
		s2.Result.Limit != 10 || s2.Result.RetryAfter != 1500*time.Millisecond || s2.Result.Allowed {
		t.Errorf("status 2 = %+v, current %+v", s2, s2.CurrentLimit)
	}
	if _, err := Response(in, 2); err == nil {
		t.Errorf("Response with 3 statuses for 2 descriptors: no error")
	}
}

// TestRefusedResetIsTheRetry: a refused bucket's duration_until_reset is
// when the request would pass (Retry-After in process), not when the bucket
// is full again, so a client over gRPC waits as long as one in process (3s,
// not 18s).
func TestRefusedResetIsTheRetry(t *testing.T) {
	cl := &service.CurrentLimit{RequestsPerUnit: 1, Unit: "second", Window: 3 * time.Second}
	st := service.Status{Code: service.CodeOverLimit, CurrentLimit: cl, Result: sluice.Result{Limit: 6, ResetAfter: 18 * time.Second, RetryAfter: 3 * time.Second, Reason: sluice.ReasonLimited}}
	pb := ToProto(service.Response{OverallCode: service.CodeOverLimit, Statuses: []service.Status{st}})
	if got := pb.GetStatuses()[0].GetDurationUntilReset().AsDuration(); got != 3*time.Second {
		t.Errorf("duration_until_reset %v, want 3s (the retry)", got)
	}
	back, err := Response(pb, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r := back.Statuses[0].Result; r.RetryAfter != 3*time.Second || r.Reason != sluice.ReasonLimited {
		t.Errorf("read back: retry %v reason %v, want 3s limited", r.RetryAfter, r.Reason)
	}
}

// TestChoiceRoundTrip: a choice goes to dynamic_metadata (ChoiceKey) and
// back, and on the way back an OVER_LIMIT status of the admitted response
// is an alternative passed over; a malformed choice is none.
func TestChoiceRoundTrip(t *testing.T) {
	cl := &service.CurrentLimit{RequestsPerUnit: 1, Unit: "minute", Window: time.Minute}
	c := &service.Choice{Group: "model", Index: 1, Descriptor: 2, Key: "model", Value: "gpt-4o-mini"}
	resp := service.Response{OverallCode: service.CodeOK, Choice: c, Statuses: []service.Status{
		{Code: service.CodeOK, CurrentLimit: cl, Result: sluice.Result{Allowed: true, Limit: 1}},
		{Code: service.CodeOverLimit, CurrentLimit: cl, Result: sluice.Result{Limit: 1, Reason: sluice.ReasonLimited, RetryAfter: time.Second}},
		{Code: service.CodeOK, CurrentLimit: cl, Result: sluice.Result{Allowed: true, Limit: 1}},
	}}
	out, err := Response(ToProto(resp), 3)
	if err != nil {
		t.Fatal(err)
	}
	if out.Choice == nil || *out.Choice != *c {
		t.Fatalf("choice back %+v, want %+v", out.Choice, *c)
	}
	for i, st := range out.Statuses {
		if st.PassedOver != (i == 1) {
			t.Errorf("status %d: passed over %v, want %v", i, st.PassedOver, i == 1)
		}
	}
	bad := ToProto(resp)
	bad.DynamicMetadata.Fields[ChoiceKey].GetStructValue().Fields["model"].GetStructValue().Fields["descriptor"] = structpb.NewNumberValue(7)
	if out, err := Response(bad, 3); err != nil || out.Choice != nil || out.Statuses[1].PassedOver {
		t.Errorf("a choice naming descriptor 7 of 3: %+v, %v; want no choice", out.Choice, err)
	}
}
