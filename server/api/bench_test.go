package api

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/memory"
)

// BenchmarkCheckHandler: POST /v1/check through New's handler, without the
// HTTP transport: read, decode, decide (memory store, 10^4 keys allowed),
// encode. The transport's share is scripts/instr-transport.sh's.
func BenchmarkCheckHandler(b *testing.B) {
	snap, err := rules.Parse("bench.yaml", []byte("domain: bench\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 1000000}\n"), rules.Options{})
	if err != nil {
		b.Fatal(err)
	}
	st := memory.New(memory.Options{})
	b.Cleanup(func() { st.Close() })
	e, err := service.New(service.DefaultConfig(), service.StaticRules{Snapshot: snap}, st, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	h, err := New(Options{Checker: e})
	if err != nil {
		b.Fatal(err)
	}
	bodies := make([]string, 10_000)
	for i := range bodies {
		bodies[i] = fmt.Sprintf(`{"domain":"bench","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.%d.%d"}]}]}`, i>>8, i&255)
	}
	req := httptest.NewRequest(http.MethodPost, "/v1/check", nil)
	rd := strings.NewReader("")
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		rd.Reset(bodies[i%len(bodies)])
		req.Body, req.ContentLength = readCloser{rd}, int64(rd.Len())
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	}
}

type readCloser struct{ *strings.Reader }

func (readCloser) Close() error { return nil }
