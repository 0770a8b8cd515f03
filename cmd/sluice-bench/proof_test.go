package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/proof/check"
)

// TestProofRecheck: proof --check re-checks a recorded history: a history
// at its bound passes, one admission more fails naming the violation.
func TestProofRecheck(t *testing.T) {
	rules := []check.Rule{{Name: "fw", Kind: "window", Quota: 2, WindowUS: 1e6, FailureMode: "closed"}}
	ev := func(t int64) check.Event {
		return check.Event{Rule: "fw", Key: "k", Cost: 1, Send: t, Recv: t + 1000, Verdict: check.Allowed}
	}
	for _, tc := range []struct {
		name    string
		events  []check.Event
		wantErr bool
	}{
		{"at the bound", []check.Event{ev(1_000_000), ev(1_100_000)}, false},
		{"one over", []check.Event{ev(1_000_000), ev(1_100_000), ev(1_200_000)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "h.jsonl")
			var b bytes.Buffer
			if err := check.WriteJSONL(&b, check.History{Rules: rules, Events: tc.events}); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			err := run(context.Background(), []string{"proof", "--check", file}, func(string) string { return "" }, &out, &bytes.Buffer{})
			if (err != nil) != tc.wantErr {
				t.Errorf("proof --check: got error %v, want error %v\n%s", err, tc.wantErr, out.String())
			}
			if tc.wantErr && !strings.Contains(out.String(), "VIOLATION window") {
				t.Errorf("output:\n%s\nwant the window violation named", out.String())
			}
		})
	}
}
