package api

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
)

// TestAppendCheckResponseMatchesMarshal: the hand encoder writes the bytes
// encoding/json writes (marshal, with CheckStatus.MarshalJSON) for random
// responses, strings that need escaping included.
func TestAppendCheckResponseMatchesMarshal(t *testing.T) {
	strs := []string{"", "OK", "OVER_LIMIT", "tenant=acme.user", "a<b>&c", "quote\"back\\slash", "ctl\x00\x01\x1f\t\n\r\b\f",
		"bad\xffutf8\xc3", "line\u2028sep\u2029", "ünïcødé 日本", "\x7f", string(service.FailedOpen), string(service.FailedClosed), "local"}
	r := rand.New(rand.NewPCG(1, 2))
	pick := func() string { return strs[r.IntN(len(strs))] }
	num := func() int64 {
		switch r.IntN(4) {
		case 0:
			return 0
		case 1:
			return -r.Int64N(1000)
		}
		return r.Int64N(1 << 40)
	}
	cases := []CheckResponse{{}, {Statuses: []CheckStatus{}}}
	for range 20_000 {
		resp := CheckResponse{Allowed: r.IntN(2) == 0, Code: pick(), Reason: pick(), Statuses: make([]CheckStatus, r.IntN(4))}
		if r.IntN(10) == 0 {
			resp.Statuses = nil
		}
		for i := range resp.Statuses {
			s := CheckStatus{Code: pick(), Rule: pick(), Unlimited: r.IntN(2) == 0, Reason: pick(),
				Remaining: num(), ResetAfterMs: num(), RetryAfterMs: num(), DelayMs: num(),
				Shadowed: r.IntN(2) == 0, Degraded: pick(), Lease: uint64(max(num(), 0)), Untried: r.IntN(4) == 0, PassedOver: r.IntN(4) == 0}
			if r.IntN(3) > 0 {
				s.Limit = &LimitJSON{Name: pick(), RequestsPerUnit: r.Uint32(), Unit: pick(), WindowMs: num(), Algorithm: pick()}
			}
			resp.Statuses[i] = s
		}
		if r.IntN(3) == 0 {
			resp.Choice = map[string]ChoiceJSON{}
			for range r.IntN(3) + 1 {
				resp.Choice[pick()] = ChoiceJSON{Value: pick(), Key: pick(), Index: int(max(num(), 0)), Descriptor: r.IntN(4)}
			}
		}
		cases = append(cases, resp)
	}
	for i, c := range cases {
		want := marshal(c)
		if got := appendCheckResponse(nil, &c); !bytes.Equal(got, want) {
			t.Fatalf("case %d: appendCheckResponse = %s\nwant (marshal)     %s", i, got, want)
		}
	}
}

// TestAppendCheckMatches: appendCheck writes marshal(EncodeCheckResponse)
// for random engine answers: over-limit statuses of every reason, degraded,
// unlimited, without a rule or a limit, names that need escaping.
func TestAppendCheckMatches(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	names := []string{"", "bench", "a<b>&c", "bad\xffname", "line\u2028"}
	degraded := []service.Degraded{service.NotDegraded, service.FailedOpen, service.FailedClosed, service.Local}
	reasons := []sluice.Reason{sluice.ReasonAllowed, sluice.ReasonLimited, sluice.ReasonCostTooHigh, service.ReasonPenalty, service.ReasonDenyList}
	dur := func() time.Duration { return time.Duration(rng.Int64N(int64(2*time.Hour))) - time.Minute }
	for i := range 20_000 {
		resp := service.Response{OverallCode: service.Code(rng.IntN(3)), Statuses: make([]service.Status, rng.IntN(4))}
		for j := range resp.Statuses {
			s := service.Status{Code: service.Code(rng.IntN(3)), Unlimited: rng.IntN(6) == 0, Shadowed: rng.IntN(4) == 0, Untried: rng.IntN(8) == 0, PassedOver: rng.IntN(8) == 0,
				Degraded: degraded[rng.IntN(len(degraded))], Lease: uint64(rng.IntN(3)),
				Result: sluice.Result{Allowed: rng.IntN(2) == 0, Limit: rng.Int64N(1000), Remaining: rng.Int64N(1000) - 100,
					ResetAfter: dur(), RetryAfter: dur(), Delay: dur(), Reason: reasons[rng.IntN(len(reasons))]}}
			if rng.IntN(4) > 0 {
				s.Rule = &rules.Rule{ID: names[rng.IntN(len(names))] + "=x", Limit: sluice.Limit{Algorithm: sluice.Algorithm(rng.IntN(9))}}
			}
			if rng.IntN(4) > 0 {
				s.CurrentLimit = &service.CurrentLimit{Name: names[rng.IntN(len(names))], RequestsPerUnit: rng.Uint32(),
					Unit: []string{"", "second", "hour"}[rng.IntN(3)], Window: dur()}
			}
			resp.Statuses[j] = s
		}
		if rng.IntN(3) == 0 {
			resp.Choice = &service.Choice{Group: names[rng.IntN(len(names))] + "g", Index: rng.IntN(3), Descriptor: rng.IntN(4),
				Key: names[rng.IntN(len(names))], Value: names[rng.IntN(len(names))] + "v"}
		}
		want := marshal(EncodeCheckResponse(resp))
		if got := appendCheck(nil, &resp); !bytes.Equal(got, want) {
			t.Fatalf("case %d: appendCheck = %s\nwant (marshal)  %s", i, got, want)
		}
	}
}
