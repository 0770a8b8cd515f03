package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSimulate(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace.csv")
	if err := os.WriteFile(trace, []byte("time,key\n0.9,a\n0.95,a\n1.0,a\n1.05,a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	args := []string{"simulate", "--scale", "0.02", "--groups", "workload", "--format", "json",
		"--quota", "2", "--trace", trace, "--plots", dir, "--plot-format", "svg"}
	if err := run(context.Background(), args, func(string) string { return "" }, &out, &errOut); err != nil {
		t.Fatalf("simulate: %v\nstderr: %s", err, errOut.String())
	}
	var rep struct {
		Seed    uint64
		Results []struct {
			Scenario  string
			Algorithm string
			Overshoot float64
		}
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("output is not JSON: %v", err)
	}
	var sawTrace bool
	for _, r := range rep.Results {
		if r.Scenario == "trace" && r.Algorithm == "fixed_window" {
			sawTrace = true
			if r.Overshoot != 2 {
				t.Errorf("trace: fixed_window overshoot %v, want 2 (2 hits each side of the 1 s edge, quota 2)", r.Overshoot)
			}
		}
	}
	if !sawTrace {
		t.Errorf("no trace result in %d results", len(rep.Results))
	}
	if !strings.Contains(errOut.String(), "scenarios") {
		t.Errorf("stderr %q shows no progress", errOut.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "boundary.svg")); err != nil {
		t.Errorf("boundary plot: %v", err)
	}
}

func TestSimulateTable(t *testing.T) {
	t.Parallel() // its own simulation: CPU beside the tests that wait
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"simulate", "--scale", "0.02", "--groups", "workload", "--quiet"},
		func(string) string { return "" }, &out, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"boundary attack", "sliding_window", "false accepts", "reproduce: sluice simulate"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q", want)
		}
	}
	if errOut.Len() != 0 {
		t.Errorf("--quiet still wrote %q to stderr", errOut.String())
	}
}

func TestSimulateUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--format", "xml"},
		{"--plot-format", "gif"},
		{"--scale", "0"},
		{"--algorithms", "nope"},
		{"--groups", "none"},
		{"--quota", "0"},
		{"--window", "1ns"},
		{"--algorithms", "concurrency"},
		{"extra"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), append([]string{"simulate", "--quiet"}, args...), func(string) string { return "" }, &out, &errOut)
		if !errors.Is(err, errUsage) {
			t.Errorf("simulate %q: error %v, want a usage error", args, err)
		}
	}
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"simulate", "--trace", "/nonexistent/trace.csv"}, func(string) string { return "" }, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "trace") {
		t.Errorf("missing trace file: error %v, want one naming the trace", err)
	}
}
