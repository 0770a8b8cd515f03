package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestServePrices: sluice serve --prices loads the price table of the
// money budgets with the rules, and reloads it when it changes: a new
// table prices the next call, a bad one is reported (file:line on
// /debug/rules) and keeps the last good table, a fixed one is taken up.
func TestServePrices(t *testing.T) {
	dir, pdir := t.TempDir(), t.TempDir()
	data, err := os.ReadFile("../../examples/llm/rules/budgets.yaml")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "budgets.yaml"), string(data))
	prices := filepath.Join(pdir, "prices.yaml")
	table := func(input string) string { return "currency: USD\nmodels:\n  m:\n    input: " + input + "\n" }
	write := func(body string) {
		t.Helper()
		tmp := filepath.Join(pdir, ".prices.tmp")
		writeFile(t, tmp, body)
		if err := os.Rename(tmp, prices); err != nil {
			t.Fatal(err)
		}
	}
	write(table("1000000")) // 1 µ$ an input token
	ts := startServer(t, dir, func(c *serveConfig) { c.Rules.Prices = prices })
	// spend calls key with in input tokens and returns what its budget
	// has left after.
	spend := func(in string) uint32 {
		t.Helper()
		d := descriptor("api_key", "k", "model", "m", "input_tokens", in, "output_tokens", "0", "cached_tokens", "0")
		ts.should(t, &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
		return ts.should(t, &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			descriptor("api_key", "k", "model", "m", "input_tokens", "0", "output_tokens", "0", "cached_tokens", "0")}}).GetStatuses()[0].GetLimitRemaining()
	}
	left := spend("100")
	if left != 50_000_000-100 {
		t.Fatalf("after 100 tokens at 1 µ$: %d left, want %d", left, 50_000_000-100)
	}
	write(table("3000000"))
	eventually(t, "the new table to price calls (3 µ$ a token)", func() bool {
		before := left
		left = spend("1")
		return before-left == 3
	})
	write("currency: USD\nmodels:\n  m:\n    input: -5\n")
	eventually(t, "the bad table to be reported on /debug/rules", func() bool {
		_, body := get(t, "http://"+ts.debugLn.Addr().String()+"/debug/rules")
		return strings.Contains(body, "prices.yaml:4") && strings.Contains(body, "models.m.input")
	})
	before := left
	if left = spend("1"); before-left != 3 {
		t.Errorf("after a bad table, a token cost %d µ$, want the last good 3", before-left)
	}
	write(table("2000000"))
	eventually(t, "the fixed table to price calls (2 µ$ a token)", func() bool {
		before := left
		left = spend("1")
		return before-left == 2
	})
}
