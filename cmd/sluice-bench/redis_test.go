package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/redistest"
)

func TestBenchRedis(t *testing.T) {
	srv := redistest.Start(t)
	var out, errOut bytes.Buffer
	args := []string{"redis", "--redis-url", srv.URL(), "--duration", "300ms", "--goroutines", "8", "--keys", "100"}
	if err := run(context.Background(), args, func(string) string { return "" }, &out, &errOut); err != nil {
		t.Fatalf("run(%v) = %v; stderr %s", args, err, errOut.String())
	}
	if !strings.Contains(out.String(), "decisions/s") || !strings.Contains(out.String(), "p99") {
		t.Fatalf("output %q, want decisions/s and p99", out.String())
	}
}

func TestBenchRedisUsage(t *testing.T) {
	for _, args := range [][]string{
		{"redis", "--algorithm", "nope"},
		{"redis", "--goroutines", "0"},
		{"redis", "--redis-url", "http://x"},
		{"redis", "--window", "0s"},
	} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), args, func(string) string { return "" }, &out, &errOut); !errors.Is(err, errUsage) {
			t.Errorf("run(%v) = %v, want a usage error", args, err)
		}
	}
}
