package client

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/sluice-rl/sluice/headers"
)

// TestCostTooHighGivesUpAtOnce: a 429 whose problem says cost_too_high is
// returned at once, body intact; any other 429 is retried.
func TestCostTooHighGivesUpAtOnce(t *testing.T) {
	tests := []struct {
		name     string
		reason   string
		attempts int32
	}{
		{"cost too high", headers.ReasonCostTooHigh, 1},
		{"limited", headers.ReasonLimited, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var n atomic.Int32
			body := headers.QuotaExceeded([]string{"per_key"}, "")
			body.Reason = tt.reason
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				n.Add(1)
				headers.WriteProblem(w, body)
			}))
			defer srv.Close()
			tr := &Transport{MaxAttempts: 3}
			newFakeTime(tr, 0)
			resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if got := n.Load(); got != tt.attempts {
				t.Errorf("attempts = %d, want %d", got, tt.attempts)
			}
			if p, err := headers.ParseProblem(b); err != nil || p.Reason != tt.reason || resp.StatusCode != 429 {
				t.Errorf("caller got status %d, problem %+v (%v); want the 429 with its body whole", resp.StatusCode, p, err)
			}
		})
	}
}
