package api

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/strictjson/strictjsontest"
	"github.com/sluice-rl/sluice/service"
)

// maxBody is `sluice serve`'s --max-request-bytes default: the largest
// body a handler passes to a decoder.
const maxBody = 256 << 10

// TestWorstBodiesAllocation: for every JSON body this package decodes
// (envoy's /json included), the worst bodies within the body limit (deep
// nesting, many and repeated members, long strings, many descriptors,
// entries and leases) allocate within strictjsontest.Budget, and are
// refused.
func TestWorstBodiesAllocation(t *testing.T) {
	entries16 := strings.TrimSuffix(strings.Repeat(`{"key":"k","value":"v"},`, 16), ",")
	bodies := strictjsontest.Worst(maxBody, "domain",
		strictjsontest.Shape{Name: "many descriptors", Prefix: `{"domain":"d","descriptors":[`, Elem: `{"entries":[{"key":"k","value":"v"}]}`, Suffix: `]}`},
		strictjsontest.Shape{Name: "many empty descriptors", Prefix: `{"domain":"d","descriptors":[`, Elem: `{}`, Suffix: `]}`},
		strictjsontest.Shape{Name: "descriptors of 16 entries", Prefix: `{"domain":"d","descriptors":[`, Elem: `{"entries":[` + entries16 + `]}`, Suffix: `]}`},
		strictjsontest.Shape{Name: "many entries", Prefix: `{"domain":"d","descriptors":[{"entries":[`, Elem: `{"key":"k#","value":"v"}`, Suffix: `]}]}`},
		strictjsontest.Shape{Name: "many empty entries", Prefix: `{"domain":"d","descriptors":[{"entries":[`, Elem: `{}`, Suffix: `]}]}`},
		strictjsontest.Shape{Name: "many leases", Prefix: `{"domain":"d","descriptors":[{"entries":[{"key":"k"}]}],"leases":[`, Elem: `0`, Suffix: `]}`},
		strictjsontest.Shape{Name: "many descriptor hits", Prefix: `{"domain":"d","descriptors":[`, Elem: `{"hits":1}`, Suffix: `]}`},
		strictjsontest.Shape{Name: "many limits", Prefix: `{"domain":"d","descriptors":[`, Elem: `{"limit":{"requests_per_unit":1,"unit":"second"}}`, Suffix: `]}`},
		strictjsontest.Shape{Name: "repeated descriptors member", Prefix: `{"domain":"d",`, Elem: `"descriptors":[]`, Suffix: `}`},
		strictjsontest.Shape{Name: "long unit", Prefix: `{"domain":"d","descriptors":[{"entries":[{"key":"k"}],"limit":{"requests_per_unit":1,"unit":"`, Elem: `u`, Suffix: `"}}]}`},
		strictjsontest.Shape{Name: "long value", Prefix: `{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"`, Elem: `v`, Suffix: `"}]}]}`},
		strictjsontest.Shape{Name: "long hits", Prefix: `{"domain":"d","hits":1`, Elem: `0`, Suffix: `}`},
		// envoy's /json: its other spellings, and the strings protojson
		// quotes whole in its errors.
		strictjsontest.Shape{Name: "many descriptors, name escaped", Prefix: `{"domain":"d","descr\u0069ptors":[`, Elem: `{}`, Suffix: `]}`},
		strictjsontest.Shape{Name: "many entries, name escaped", Prefix: `{"domain":"d","descriptors":[{"\u0065ntries":[`, Elem: `{}`, Suffix: `]}]}`},
		strictjsontest.Shape{Name: "long string for a number", Prefix: `{"domain":"d","hitsAddend":"1`, Elem: `0`, Suffix: `"}`},
		strictjsontest.Shape{Name: "long string for a wrapped number", Prefix: `{"domain":"d","descriptors":[{"hits_addend":"1`, Elem: `0`, Suffix: `"}]}`},
		strictjsontest.Shape{Name: "long string for a bool", Prefix: `{"domain":"d","descriptors":[{"isNegativeHits":"t`, Elem: `0`, Suffix: `"}]}`},
		strictjsontest.Shape{Name: "long string for an enum", Prefix: `{"domain":"d","descriptors":[{"limit":{"requestsPerUnit":1,"unit":"S`, Elem: `0`, Suffix: `"}}]}`},
	)
	surfaces := []struct {
		name   string
		decode func([]byte) error
	}{
		{"POST /v1/check", func(b []byte) error { _, err := decodeCheck(bytes.NewReader(b), service.RequestBounds{}); return err }},
		{"POST /v1/release", func(b []byte) error {
			_, _, err := decodeRelease(bytes.NewReader(b), service.RequestBounds{})
			return err
		}},
		{"POST /v1/charge", func(b []byte) error { _, err := decodeCharge(bytes.NewReader(b), service.RequestBounds{}); return err }},
		{"POST /json", func(b []byte) error { _, err := decodeEnvoyJSON(b, service.RequestBounds{}); return err }},
	}
	for _, s := range surfaces {
		for _, body := range bodies {
			var err error
			budget := strictjsontest.Budget(len(body.B))
			got := strictjsontest.Allocated(budget, func() { err = s.decode(body.B) })
			if got > budget {
				t.Errorf("%s, %s (%d bytes): allocated %d bytes, want at most %d (%d per body byte + %d)",
					s.name, body.Name, len(body.B), got, budget, strictjsontest.BudgetFactor, strictjsontest.BudgetSlack)
			}
			if err == nil {
				t.Errorf("%s, %s: decoded, want an error", s.name, body.Name)
			}
			t.Logf("%s, %s: %d bytes allocated for %d (%.1f per byte)", s.name, body.Name, got, len(body.B), float64(got)/float64(len(body.B)))
		}
	}
}
