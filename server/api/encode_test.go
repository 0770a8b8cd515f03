package api

import (
	"bytes"
	"math/rand/v2"
	"testing"

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
				Shadowed: r.IntN(2) == 0, Degraded: pick(), Lease: uint64(max(num(), 0))}
			if r.IntN(3) > 0 {
				s.Limit = &LimitJSON{Name: pick(), RequestsPerUnit: r.Uint32(), Unit: pick(), WindowMs: num(), Algorithm: pick()}
			}
			resp.Statuses[i] = s
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
