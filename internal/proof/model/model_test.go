package model

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// needSpin skips the test when spin or cc is absent, except in CI
// (CI=true), where .ci/run installs spin and a missing tool fails.
func needSpin(t *testing.T, err error) {
	t.Helper()
	if errors.Is(err, ErrNoSpin) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and %v", err)
		}
		t.Skipf("skipped: %v", err)
	}
}

// TestModel checks every configuration of the allotment model
// exhaustively: no assertion (BOUND, TTL, window) fails in any reachable
// state. Each configuration holds the state space to about a million
// states, so the faults are spread over them.
func TestModel(t *testing.T) {
	cases := []struct {
		name    string
		defines []string
	}{
		// Two hybrid instances, a reset through one of them heard by the
		// other, lost or reported missed, with leases and give-backs on
		// their way: one window of quota 3.
		{"reset", []string{"-DNH=2", "-DQ=3", "-DSPLIT=1", "-DWANT=1", "-DTMAX=2", "-DMAXDEATHS=0", "-DMAXLOST=0"}},
		// Two hybrid instances over two windows of quota 4, Split 2,
		// Keep 1: an instance dies, a reply is lost, late replies and
		// give-backs cross the window's edge.
		{"faults", []string{"-DNH=2", "-DQ=4", "-DTMAX=4", "-DMAXRESETS=0"}},
		// One hybrid instance and one RLQS client (assignments replaced,
		// never revoked by a reset, the last units one at a time, Keep 0),
		// a reset, two windows of quota 3.
		{"rlqs", []string{"-DNH=1", "-DN=2", "-DQ=3", "-DSPLIT=1", "-DWANT=1", "-DTMAX=3", "-DMAXLOST=0", "-DMAXDEATHS=0"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r, err := Verify(t.TempDir(), c.defines)
			needSpin(t, err)
			if err != nil {
				t.Fatal(err)
			}
			if r.Errors != 0 {
				t.Fatalf("%s: got %d errors, want 0: %s\n%s", c.name, r.Errors, r.Violation, r.Output)
			}
			if r.States < 1000 {
				t.Fatalf("%s: got %d states searched, want at least 1000 (a model that does nothing passes)", c.name, r.States)
			}
			t.Logf("%s: %d states, depth %d, no violation", c.name, r.States, r.Depth)
		})
	}
}

// TestModelMutants removes one safeguard of the code from the model at a
// time: the checks must catch each (else they check nothing).
func TestModelMutants(t *testing.T) {
	small := []string{"-DNH=2", "-DQ=3", "-DSPLIT=1", "-DWANT=1", "-DTMAX=3", "-DMAXDEATHS=0", "-DMAXLOST=0", "-DMAXRESETS=0"}
	cases := []struct {
		mutant, want string
	}{
		// store/hybrid's allot: deadline = sent + TTL. From the reply's
		// arrival, a late reply's units outlive their window.
		{"-DMUTANT_ARRIVAL", "assertion violated"},
		// store/memory's and allot.lua's give-back: only in its own
		// epoch. In any, a late give-back frees a later window's quota.
		{"-DMUTANT_ANYEPOCH", "assertion violated"},
	}
	for _, c := range cases {
		t.Run(strings.TrimPrefix(c.mutant, "-DMUTANT_"), func(t *testing.T) {
			t.Parallel()
			r, err := Falsify(t.TempDir(), append(append([]string(nil), small...), c.mutant))
			needSpin(t, err)
			if err != nil {
				t.Fatal(err)
			}
			if r.Errors == 0 || !strings.Contains(r.Violation, c.want) {
				t.Fatalf("%s: got %d errors (%q), want a violation %q", c.mutant, r.Errors, r.Violation, c.want)
			}
			t.Logf("%s: caught: %s", c.mutant, r.Violation)
		})
	}
}
