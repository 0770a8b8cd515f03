package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestClockSkew: --clock-skew moves the clock the in-process store reads.
// On the same fake clock, a one-minute fixed window is 15 s nearer its end
// on the server whose clock runs 15 s ahead.
func TestClockSkew(t *testing.T) {
	dir := t.TempDir()
	rule := "domain: skew\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"
	if err := os.WriteFile(filepath.Join(dir, "skew.yaml"), []byte(rule), 0o644); err != nil {
		t.Fatal(err)
	}
	resetAfter := func(skew time.Duration) time.Duration {
		t.Helper()
		ts := startServer(t, dir, func(c *serveConfig) { c.Store.Memory.ClockSkew = skew })
		resp, err := http.Post(ts.base+"/v1/check", "application/json",
			strings.NewReader(`{"domain":"skew","descriptors":[{"entries":[{"key":"k","value":"a"}]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var cr struct {
			Statuses []struct {
				ResetAfterMs int64 `json:"reset_after_ms"`
			}
		}
		if err := json.NewDecoder(resp.Body).Decode(&cr); err != nil || len(cr.Statuses) != 1 {
			t.Fatalf("check: %v, %+v", err, cr)
		}
		return time.Duration(cr.Statuses[0].ResetAfterMs) * time.Millisecond
	}
	base, skewed := resetAfter(0), resetAfter(15*time.Second)
	if d := (base - skewed + time.Minute) % time.Minute; d != 15*time.Second {
		t.Errorf("reset after: %v without skew, %v with 15 s: differ by %v (mod 1m), want 15s", base, skewed, d)
	}
}
