package rules

import "testing"

// TestChoice reads rate_limit.choice into Rule.Choice: rules of one group
// keep its name, a rule without the key has none.
func TestChoice(t *testing.T) {
	const file = `domain: llm
descriptors:
  - key: key
    rate_limit: {unit: day, requests_per_unit: 1000}
    descriptors:
      - key: model
        value: gpt-4o
        rate_limit: {unit: minute, requests_per_unit: 10, choice: model}
      - key: model
        rate_limit: {unit: minute, requests_per_unit: 100, choice: model, settle: after}
`
	snap, err := Parse("llm.yaml", []byte(file), Options{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		entries []Entry
		choice  string
	}{
		{[]Entry{{"key", "k"}, {"model", "gpt-4o"}}, "model"},
		{[]Entry{{"key", "k"}, {"model", "gpt-4o-mini"}}, "model"},
		{[]Entry{{"key", "k"}}, ""},
	}
	for _, tt := range tests {
		r := snap.Match("llm", tt.entries)
		if r == nil {
			t.Fatalf("Match(%v) = nil, want a rule", tt.entries)
		}
		if r.Choice != tt.choice {
			t.Errorf("Match(%v).Choice = %q, want %q", tt.entries, r.Choice, tt.choice)
		}
	}
}
