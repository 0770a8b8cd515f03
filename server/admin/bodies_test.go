package admin

import (
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/strictjson/strictjsontest"
)

// maxBody is the admin API's body limit (Options.MaxBodyBytes' default).
const maxBody = 256 << 10

// TestWorstBodiesAllocation: for every body the admin API decodes, the
// worst bodies within its limit (deep nesting, many and repeated members,
// long strings, many overrides and entries) allocate within
// strictjsontest.Budget, and are refused.
func TestWorstBodiesAllocation(t *testing.T) {
	override := `{"domain":"api","descriptor":"","requests_per_unit":5,"unit":"minute","effective_at":"2030-01-02T00:00:00Z"}`
	surfaces := []struct {
		name   string
		known  string
		decode func([]byte) error
		shapes []strictjsontest.Shape
	}{
		{"PUT /admin/v1/quotas/{tenant}", "tier", func(b []byte) error { _, err := DecodeQuota(b, "acme"); return err }, []strictjsontest.Shape{
			{Name: "many overrides", Prefix: `{"tier":"pro","overrides":[`, Elem: override, Suffix: `]}`},
			{Name: "many empty overrides", Prefix: `{"tier":"pro","overrides":[`, Elem: `{}`, Suffix: `]}`},
			{Name: "repeated overrides member", Prefix: `{"tier":"pro",`, Elem: `"overrides":[` + override + `]`, Suffix: `}`},
			{Name: "long window", Prefix: `{"tier":"pro","overrides":[{"window":"1`, Elem: `0`, Suffix: `s"}]}`},
			{Name: "long time", Prefix: `{"tier":"pro","effective_at":"2030-01-02T00:00:00.1`, Elem: `0`, Suffix: `Z"}`},
		}},
		{"PUT /admin/v1/switches", "domain", func(b []byte) error { _, _, _, err := DecodeSwitch(b); return err }, nil},
		{"PUT and DELETE /admin/v1/deny", "key", func(b []byte) error { _, err := DecodeDeny(b); return err }, []strictjsontest.Shape{
			{Name: "long reason", Prefix: `{"domain":"d","key":"k","reason":"`, Elem: strings.Repeat("r", 64), Suffix: `"}`},
		}},
		{"POST /admin/v1/reset", "tenant", func(b []byte) error { _, _, err := DecodeReset(b); return err }, []strictjsontest.Shape{
			{Name: "many entries", Prefix: `{"domain":"api","descriptor":[`, Elem: `{"key":"k#","value":"v"}`, Suffix: `]}`},
			{Name: "many empty entries", Prefix: `{"domain":"api","descriptor":[`, Elem: `{}`, Suffix: `]}`},
		}},
	}
	for _, s := range surfaces {
		for _, body := range strictjsontest.Worst(maxBody, s.known, s.shapes...) {
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
