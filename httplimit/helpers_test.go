package httplimit

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/storetest"
)

const testRules = `
domain: web
descriptors:
  - key: remote_address
    rate_limit: {name: per_ip, unit: minute, requests_per_unit: 3}
  - key: remote_address
    value: 192.0.2.99
    rate_limit: {unlimited: true}
  - key: api_key
    rate_limit: {name: per_key, algorithm: token_bucket, unit: second, requests_per_unit: 10, burst: 5}
  - key: api_key
    value: blocked
    rate_limit: {name: blocked, unit: second, requests_per_unit: 0}
  - key: shadow
    shadow_mode: true
    rate_limit: {name: trial, unit: minute, requests_per_unit: 1}
  - key: queue
    rate_limit: {name: shaped, algorithm: leaky_bucket, unit: second, requests_per_unit: 10, burst: 100}
  - key: closed
    rate_limit: {name: strict, unit: second, requests_per_unit: 5, failure_mode: closed}
`

// newEngine returns an engine over testRules and a memory store on a fake
// clock (or over store, when given).
func newEngine(t testing.TB, clock *storetest.Clock, store sluice.Store) *service.Engine {
	t.Helper()
	snap, err := rules.Parse("web.yaml", []byte(testRules), rules.Options{})
	if err != nil {
		t.Fatalf("rules.Parse: %v", err)
	}
	if store == nil {
		mem := memory.New(memory.Options{Now: clock.Now})
		t.Cleanup(func() { mem.Close() })
		store = mem
	}
	e, err := service.New(service.DefaultConfig(), service.StaticRules{Snapshot: snap}, store, nil, nil)
	if err != nil {
		t.Fatalf("service.New: %v", err)
	}
	return e
}

// downStore is a store that is down.
type downStore struct{}

func (downStore) Take(context.Context, []sluice.Op, []sluice.Result) error {
	return errors.New("connection refused")
}

// failingChecker is a remote Checker that cannot be reached.
type failingChecker struct{}

func (failingChecker) Check(context.Context, service.Request) (service.Response, error) {
	return service.Response{}, errors.New("dial tcp: connection refused")
}

// ok is the wrapped handler: it counts calls and answers 200 "hello".
type okHandler struct{ calls int }

func (h *okHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.calls++
	_, _ = io.WriteString(w, "hello")
}

// do sends one request through h from remote with the given headers.
func do(h http.Handler, remote string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "http://api.test/v1/things", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func mustNew(t testing.TB, next http.Handler, cfg Config) *Handler {
	t.Helper()
	h, err := New(next, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return h
}

func fieldOf(w *httptest.ResponseRecorder, k string) string {
	return strings.Join(w.Result().Header.Values(k), "|")
}
