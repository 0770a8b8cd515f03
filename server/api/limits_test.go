package api

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/memory"
)

// Every endpoint that takes descriptors answers 400 naming the limit a
// request exceeds, and 413 naming the body limit.
func TestLimitsHTTP(t *testing.T) {
	lim := service.RequestBounds{MaxKeyBytes: 8, MaxValueBytes: 16, MaxDescriptors: 3, MaxEntries: 2}
	snap, err := rules.Parse("edge.yaml", []byte(testRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := memory.New(memory.Options{})
	defer st.Close()
	cfg := service.DefaultConfig()
	cfg.RequestBounds = lim
	eng, err := service.New(cfg, service.StaticRules{Snapshot: snap}, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(Options{Checker: eng, RequestBounds: lim, MaxBodyBytes: 4096, Charger: eng, ChargeAuth: func(next http.Handler) http.Handler { return next }})
	if err != nil {
		t.Fatal(err)
	}
	entry := func(k, v string) string { return fmt.Sprintf(`{"key":%q,"value":%q}`, k, v) }
	descs := func(n int, entries ...string) string {
		var ds []string
		for range n {
			ds = append(ds, `{"entries":[`+strings.Join(entries, ",")+`]}`)
		}
		return strings.Join(ds, ",")
	}
	tests := []struct {
		name, domain, descriptors, want string
	}{
		{"domain", "123456789", descs(1, entry("k", "v")), "domain: 9 bytes exceeds the limit max-key-bytes=8"},
		{"descriptors", "edge", descs(4, entry("k", "v")), "descriptors: 4 exceeds the limit max-descriptors=3"},
		{"entries", "edge", descs(1, entry("a", "1"), entry("b", "2"), entry("c", "3")), "descriptors[0].entries: 3 exceeds the limit max-entries=2"},
		{"key", "edge", descs(1, entry("123456789", "1")), "descriptors[0].entries[0].key: 9 bytes exceeds the limit max-key-bytes=8"},
		{"value", "edge", descs(1, entry("a", strings.Repeat("v", 17))), "descriptors[0].entries[0].value: 17 bytes exceeds the limit max-value-bytes=16"},
	}
	for _, tt := range tests {
		check := fmt.Sprintf(`{"domain":%q,"descriptors":[%s]}`, tt.domain, tt.descriptors)
		n := strings.Count(tt.descriptors, `"entries"`)
		release := fmt.Sprintf(`{"domain":%q,"descriptors":[%s],"leases":[%s]}`, tt.domain, tt.descriptors, strings.TrimSuffix(strings.Repeat("0,", n), ","))
		charge := fmt.Sprintf(`{"domain":%q,"descriptors":[%s],"hits":-1}`, tt.domain, tt.descriptors)
		// protojson reads the same shape.
		for _, c := range []struct{ path, body string }{{"/v1/check", check}, {"/v1/release", release}, {"/v1/charge", charge}, {"/json", check}} {
			code, _, out := do(t, h, "POST", c.path, c.body)
			if code != 400 || !strings.Contains(out, tt.want) {
				t.Errorf("%s: POST %s = %d %s, want 400 containing %q", tt.name, c.path, code, out, tt.want)
			}
		}
	}
	if keys := st.Stats().Keys; keys != 0 {
		t.Errorf("store holds %d keys after refused requests, want 0", keys)
	}
	code, _, out := do(t, h, "POST", "/v1/check", fmt.Sprintf(`{"domain":"edge","descriptors":[{"entries":[%s]}]}`, entry("a", strings.Repeat("v", 5000))))
	if code != 413 || !strings.Contains(out, "max-request-bytes=4096") {
		t.Errorf("POST /v1/check of a 5 KB body = %d %s, want 413 naming max-request-bytes=4096", code, out)
	}
	code, _, out = do(t, h, "POST", "/v1/check", fmt.Sprintf(`{"domain":"edge","descriptors":[{"entries":[%s]}]}`, entry("ldap", "1.2.3.4")))
	if code != 200 {
		t.Errorf("POST /v1/check within limits = %d %s, want 200", code, out)
	}
}
