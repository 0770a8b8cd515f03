package rules

import (
	"strings"
	"testing"
)

func TestDenyList(t *testing.T) {
	y := `domain: edge
deny:
  - {key: remote_address, cidr: 10.0.0.0/8}
  - {key: remote_address, cidr: "2001:db8::/32"}
  - {key: remote_address, cidr: 192.0.2.7}
  - {key: remote_address, cidr: "::ffff:198.51.100.0/120"}
  - {key: api_key, value: leaked}
  - {key: bot}
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 1}
`
	s, err := Parse("d.yaml", []byte(y), Options{})
	if err != nil {
		t.Fatal(err)
	}
	dl := s.DenyList("edge")
	if dl.Len() != 6 {
		t.Fatalf("Len = %d, want 6", dl.Len())
	}
	tests := []struct {
		key, value string
		want       bool
	}{
		{"remote_address", "10.1.2.3", true},
		{"remote_address", "11.1.2.3", false},
		{"remote_address", "::ffff:10.9.9.9", true}, // IPv4-mapped counts as IPv4
		{"remote_address", "2001:db8:1::1", true},
		{"remote_address", "2001:db9::1", false},
		{"remote_address", "192.0.2.7", true},
		{"remote_address", "192.0.2.8", false},
		{"remote_address", "198.51.100.200", true},
		{"remote_address", "not an address", false},
		{"api_key", "leaked", true},
		{"api_key", "fine", false},
		{"bot", "anything", true},
		{"other", "10.1.2.3", false},
	}
	for _, tt := range tests {
		if got := dl.Denies(Entry{Key: tt.key, Value: tt.value}); got != tt.want {
			t.Errorf("Denies(%s=%s) = %v, want %v", tt.key, tt.value, got, tt.want)
		}
	}
	if s.DenyList("other") != nil {
		t.Error("a domain without deny has a list")
	}
}

func TestDenyListErrors(t *testing.T) {
	tests := []struct{ deny, want string }{
		{"deny: {key: a}", "d.yaml:2: deny: want a list, got a mapping"},
		{"deny:\n  - {key: a, cidr: 300.1.1.1}", `d.yaml:3: deny[0].cidr: want an address range such as 10.0.0.0/8 or 2001:db8::/32, got "300.1.1.1"`},
		{"deny:\n  - {key: a, value: b, cidr: 1.2.3.4}", "d.yaml:3: deny[0].cidr: give value or cidr, not both"},
		{"deny:\n  - {value: b}", "d.yaml:3: deny[0].key: required"},
		{"deny:\n  - {key: a, value: ''}", "d.yaml:3: deny[0].value: must not be empty"},
		{"deny:\n  - {key: a, colour: red}", "d.yaml:3: deny[0].colour: unknown key"},
	}
	for _, tt := range tests {
		y := "domain: edge\n" + tt.deny + "\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
		_, err := Parse("d.yaml", []byte(y), Options{})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want one containing %q", tt.deny, err, tt.want)
		}
	}
}
