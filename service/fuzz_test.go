package service

import (
	"context"
	"errors"
	"testing"

	"github.com/sluice-rl/sluice/rules"
)

// FuzzCheck sends arbitrary requests to an engine over the test rules: it
// must never panic, must refuse only with ErrInvalidRequest, and must answer
// one status per descriptor with a defined code.
func FuzzCheck(f *testing.F) {
	f.Add("test", "ip", "1.2.3.4", "", "", uint64(0), uint64(1), false, "", uint32(0))
	f.Add("test", "plan", "premium", "user", "u", uint64(3), uint64(0), false, "", uint32(0))
	f.Add("test", "path", "/api/{x}|y", "", "", uint64(1), uint64(99), true, "minute", uint32(2))
	f.Add("test", "shadow", "s", "user", "", uint64(1<<53), uint64(1<<62), true, "fortnight", uint32(1))
	f.Add("", "", "", "", "", uint64(1), uint64(1), false, "", uint32(0))
	h := newHarness(f, testRules, DefaultConfig())
	f.Fuzz(func(t *testing.T, domain, k1, v1, k2, v2 string, hits, dhits uint64, override bool, unit string, rpu uint32) {
		d := Descriptor{Entries: []rules.Entry{{Key: k1, Value: v1}}}
		if k2 != "" || v2 != "" {
			d.Entries = append(d.Entries, rules.Entry{Key: k2, Value: v2})
		}
		if dhits != 1 {
			d.Hits = &dhits
		}
		if override {
			d.Limit = &LimitOverride{RequestsPerUnit: rpu, Unit: unit}
		}
		req := Request{Domain: domain, Hits: hits, Descriptors: []Descriptor{d, desc("ip", v1), d}}
		resp, err := h.eng.Check(context.Background(), req)
		if err != nil {
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("Check error %v does not wrap ErrInvalidRequest", err)
			}
			return
		}
		if len(resp.Statuses) != len(req.Descriptors) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(req.Descriptors))
		}
		over := false
		for i, st := range resp.Statuses {
			if st.Code != CodeOK && st.Code != CodeOverLimit {
				t.Fatalf("status %d code %v", i, st.Code)
			}
			over = over || st.Code == CodeOverLimit
		}
		if want := map[bool]Code{false: CodeOK, true: CodeOverLimit}[over]; resp.OverallCode != want {
			t.Fatalf("overall %v with statuses %+v, want %v", resp.OverallCode, resp.Statuses, want)
		}
	})
}
