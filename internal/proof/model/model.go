// Package model holds a Spin (Promela) model of the allotment protocol,
// allot.pml: store/hybrid's leases and server/rlqs's assignments of one
// fixed_window key over the global store's allot arithmetic, with late
// replies, lost replies, give-backs, an instance dying, a reset and its
// announcement heard, lost or reported missed. Verify runs Spin's
// exhaustive search (pan) on it; the package's test checks every
// configuration CI runs and that each safeguard the checks rely on is
// needed (a mutant of the model without it fails). See allot.pml's
// header for the invariants and docs/accuracy.md for what they mean.
// It imports nothing of Sluice.
package model

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
)

//go:embed allot.pml
var source []byte

// Source returns the model's Promela text.
func Source() []byte { return append([]byte(nil), source...) }

// ErrNoSpin: spin or a C compiler is not installed.
var ErrNoSpin = errors.New("model: spin and a C compiler (cc) are needed: apt-get install spin gcc")

// Result is what one exhaustive search found.
type Result struct {
	// Errors is the number of assertion violations or invalid end states
	// pan reported (it stops at the first).
	Errors int
	// States is the number of states stored (each reachable state once).
	States int64
	// Depth is the longest path searched.
	Depth int64
	// Violation is pan's line naming the failed assertion, if any.
	Violation string
	// Output is pan's report.
	Output string
}

var (
	reErrors    = regexp.MustCompile(`depth reached (\d+), errors: (\d+)`)
	reStates    = regexp.MustCompile(`(\d+) states, stored`)
	reViolation = regexp.MustCompile(`(?m)^pan:\d+: .*$`)
)

// Verify writes the model into dir, generates the verifier with the
// preprocessor defines given (e.g. "-DNH=2"), compiles it and runs an
// exhaustive search for assertion violations and invalid end states. An
// incomplete search (out of memory or depth) is an error, as is a
// missing tool (ErrNoSpin).
func Verify(dir string, defines []string) (Result, error) {
	return verify(dir, defines, "-O2")
}

// Falsify is Verify for a model expected to fail early (a mutant): the
// same exhaustive search, from a verifier compiled without optimization.
// A search that stops at the first violation after a few thousand states
// takes milliseconds, so compiling pan.c (3 to 4.5 s of CPU at -O2,
// under 0.5 s at -O0) is nearly all its cost; a model that holds is still searched to the end,
// only more slowly.
func Falsify(dir string, defines []string) (Result, error) {
	return verify(dir, defines, "-O0")
}

func verify(dir string, defines []string, opt string) (Result, error) {
	spin, err := exec.LookPath("spin")
	if err != nil {
		return Result{}, ErrNoSpin
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		return Result{}, ErrNoSpin
	}
	if err := os.WriteFile(filepath.Join(dir, "allot.pml"), source, 0o644); err != nil {
		return Result{}, fmt.Errorf("model: %w", err)
	}
	run := func(name string, args ...string) (string, error) {
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			return string(out), fmt.Errorf("model: %s: %w\n%s", filepath.Base(name), err, out)
		}
		return string(out), nil
	}
	if _, err := run(spin, append(append([]string{"-a"}, defines...), "allot.pml")...); err != nil {
		return Result{}, err
	}
	// SAFETY: assertions and end states only; MEMLIM (MB): a search that
	// needs more stops, incomplete. Every state is stored in full: no
	// COLLAPSE (lossless too, but with state vectors of about 100 bytes
	// it saved no memory, 340 MB with it and 310 MB without for a
	// million states, and cost a fifth to a quarter more CPU: 6.3–7.4 s
	// against 5.2–6.0 s for "faults"), no BITSTATE or HC (lossy).
	if _, err := run(cc, "-w", opt, "-DSAFETY", "-DMEMLIM=2048", "-o", "pan", "pan.c"); err != nil {
		return Result{}, err
	}
	out, err := run(filepath.Join(dir, "pan"), "-m1000000")
	if err != nil && !reErrors.MatchString(out) {
		return Result{}, err
	}
	r := Result{Output: out}
	m := reErrors.FindStringSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("model: pan's report has no error count:\n%s", out)
	}
	r.Depth, _ = strconv.ParseInt(m[1], 10, 64)
	r.Errors, _ = strconv.Atoi(m[2])
	if s := reStates.FindStringSubmatch(out); s != nil {
		r.States, _ = strconv.ParseInt(s[1], 10, 64)
	}
	r.Violation = reViolation.FindString(out)
	if r.Errors == 0 && (regexp.MustCompile(`Search not completed|out of memory|max search depth too small`).MatchString(out)) {
		return r, fmt.Errorf("model: the search did not complete:\n%s", out)
	}
	return r, nil
}

// Simulate runs the model in Spin's simulation mode with -DSCRIPT: its init
// process runs script (Promela statements, the steps of a step table, in
// order; allot.pml includes it as script.pml) once, and Simulate returns
// what it printed. defines are preprocessor defines, as for Verify. An
// assertion of the model failing on the way is an error naming it.
func Simulate(dir string, script []byte, defines []string) (string, error) {
	spin, err := exec.LookPath("spin")
	if err != nil {
		return "", ErrNoSpin
	}
	if err := os.WriteFile(filepath.Join(dir, "allot.pml"), source, 0o644); err != nil {
		return "", fmt.Errorf("model: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "script.pml"), script, 0o644); err != nil {
		return "", fmt.Errorf("model: %w", err)
	}
	cmd := exec.Command(spin, append(append([]string{"-DSCRIPT"}, defines...), "allot.pml")...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("model: spin: %w\n%s", err, out)
	}
	if m := regexp.MustCompile(`(?m)^.*assertion violated.*$`).FindString(string(out)); m != "" {
		return string(out), fmt.Errorf("model: %s", m)
	}
	return string(out), nil
}
