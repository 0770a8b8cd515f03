package rules

import "testing"

func TestParseFailureMode(t *testing.T) {
	for _, s := range []string{"open", "closed", "local"} {
		m, err := ParseFailureMode(s)
		if err != nil || m.String() != s {
			t.Errorf("ParseFailureMode(%q) = %v, %v; want %s, nil", s, m, err, s)
		}
	}
	if _, err := ParseFailureMode("sideways"); err == nil {
		t.Error(`ParseFailureMode("sideways") = nil error, want one`)
	}
	if m, err := ParseFailureMode("Closed"); err != nil || m != FailureClosed {
		t.Errorf(`ParseFailureMode("Closed") = %v, %v; want closed (case-insensitive, as in rule files)`, m, err)
	}
}
