package admin

import (
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
)

// TestWorstQueryMemory: the worst query strings a client can send to the
// admin endpoints that read one — many parameters or one long one, at
// MaxQueryBytes, and 1 MiB (net/http's default bound of a request's
// header, which holds the request line) — are answered, 200, 400 or 414,
// allocating at most fixed + perByte bytes per byte of query, client,
// server and PostgreSQL's driver together (TotalAlloc over many requests,
// divided); a query over MaxQueryBytes is refused before it is parsed.
func TestWorstQueryMemory(t *testing.T) {
	const (
		fixed   = 256 << 10 // a request's own cost: the handler, the store's query, the client
		perByte = 40        // url.Values of the most parameters: 32 bytes a byte
		calls   = 20
	)
	e := newEnv(t)
	many := func(n int) string { // "a0=&a1=&...", n bytes
		var b strings.Builder
		for i := 0; b.Len() < n-16; i++ {
			fmt.Fprintf(&b, "a%d=&", i)
		}
		return b.String()
	}
	same := func(n int) string { return strings.Repeat("limit=1&", n/8) }
	long := func(n int) string { return "actor=" + strings.Repeat("%41", (n-6)/3) }
	cases := []struct {
		name, path string
		want       int
	}{
		{"quotas, many parameters", "/admin/v1/quotas?" + many(MaxQueryBytes), http.StatusOK},
		{"quotas, one repeated", "/admin/v1/quotas?" + same(MaxQueryBytes), http.StatusOK},
		{"deny, many parameters", "/admin/v1/deny?" + many(MaxQueryBytes), http.StatusOK},
		{"deny, a long cursor", "/admin/v1/deny?cursor=" + strings.Repeat("A", MaxQueryBytes-7), http.StatusBadRequest},
		{"audit, one long escaped", "/admin/v1/audit?" + long(MaxQueryBytes), http.StatusBadRequest},
		{"audit, many parameters", "/admin/v1/audit?" + many(MaxQueryBytes), http.StatusOK},
		{"quotas, 1 MiB of parameters", "/admin/v1/quotas?" + many(1<<20-4096), http.StatusRequestURITooLong},
		{"audit, 1 MiB escaped", "/admin/v1/audit?" + long(1<<20-4096), http.StatusRequestURITooLong},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodGet, e.srv.URL+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+roToken)
			do := func() int {
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.StatusCode
			}
			if got := do(); got != tc.want {
				t.Fatalf("GET %.60s…: status %d, want %d", tc.path, got, tc.want)
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for range calls {
				if got := do(); got != tc.want {
					t.Fatalf("status %d, want %d", got, tc.want)
				}
			}
			runtime.ReadMemStats(&after)
			got := (after.TotalAlloc - before.TotalAlloc) / calls
			n := len(tc.path)
			t.Logf("%d bytes of path and query: %d bytes allocated a request (%.1f a byte)", n, got, float64(got)/float64(n))
			if budget := uint64(fixed + perByte*n); got > budget {
				t.Errorf("a request of %d bytes allocated %d bytes, want at most %d (%d + %d a byte)", n, got, budget, fixed, perByte)
			}
		})
	}
}
