package rules

import (
	"strings"
	"testing"
)

func TestParseAllowRemoval(t *testing.T) {
	tests := []struct {
		name, data string
		wantErr    string
		domain     map[string]bool
		rule       map[RuleRef]bool
	}{
		{name: "empty", data: "", domain: map[string]bool{"a": false}, rule: map[RuleRef]bool{{"a", "x"}: false}},
		{name: "comments", data: "# a\n\n  # b\n", domain: map[string]bool{"a": false}},
		{name: "all", data: "*\n", domain: map[string]bool{"a": true}, rule: map[RuleRef]bool{{"b", "y"}: true}},
		{name: "domain", data: " edge \n", domain: map[string]bool{"edge": true, "other": false},
			rule: map[RuleRef]bool{{"edge", "x"}: true, {"other", "x"}: false}},
		{name: "rule", data: "edge tenant=acme.user\napi path=/a b\n", domain: map[string]bool{"edge": false},
			rule: map[RuleRef]bool{{"edge", "tenant=acme.user"}: true, {"edge", "user"}: false, {"api", "path=/a b"}: true}},
		{name: "control character", data: "ok\nbad\x00x\n", wantErr: "f:2: not printable text"},
		{name: "too big", data: strings.Repeat("a", MaxAllowRemovalBytes+1), wantErr: "above the limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := ParseAllowRemoval("f", []byte(tt.data))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseAllowRemoval = %v, want an error containing %q", err, tt.wantErr)
				}
				if !a.Empty() {
					t.Error("a bad file allows something, want nothing")
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseAllowRemoval: %v", err)
			}
			for d, want := range tt.domain {
				if got := a.Domain(d); got != want {
					t.Errorf("Domain(%q) = %v, want %v", d, got, want)
				}
			}
			for r, want := range tt.rule {
				if got := a.Rule(r); got != want {
					t.Errorf("Rule(%v) = %v, want %v", r, got, want)
				}
			}
		})
	}
}

func TestRemovedAndGuard(t *testing.T) {
	parse := func(files ...string) *Snapshot {
		t.Helper()
		var trees []*domainTree
		for i, f := range files {
			p := &parser{file: string(rune('a' + i))}
			trees = append(trees, p.parse([]byte(f)))
			if len(p.probs) > 0 {
				t.Fatal(p.probs)
			}
		}
		s, err := compile(trees, nil, Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	one := "domain: one\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
	oneA := "domain: one\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 7}\n"
	two := "domain: two\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
	rm := Removed(parse(one, two), parse(oneA))
	if strings.Join(rm.Domains, ",") != "two" || len(rm.Rules) != 1 || rm.Rules[0] != (RuleRef{"one", "b"}) {
		t.Fatalf("Removed = %+v, want domain two and rule one/b", rm)
	}
	if h := Guard(rm, AllowRemoval{}, nil); h == nil || strings.Join(h.Reasons, ",") != HoldDomainRemoved || len(h.Rules) != 0 {
		t.Errorf("Guard without traffic = %+v, want only the domain held", h)
	}
	busy := func(RuleRef) bool { return true }
	if h := Guard(rm, AllowRemoval{}, busy); h == nil || strings.Join(h.Reasons, ",") != HoldDomainRemoved+","+HoldRuleInUse {
		t.Errorf("Guard with traffic = %+v, want both reasons", h)
	}
	a, _ := ParseAllowRemoval("f", []byte("two\none b\n"))
	if h := Guard(rm, a, busy); h != nil {
		t.Errorf("Guard with everything confirmed = %+v, want nil", h)
	}
	if rm := Removed(parse(one), parse(one)); len(rm.Domains)+len(rm.Rules) != 0 {
		t.Errorf("Removed of equal snapshots = %+v, want nothing", rm)
	}
}
