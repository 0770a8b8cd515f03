package remote

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-rl/sluice/httplimit"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/server/rls"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/storetest"
)

const webRules = `
domain: web
descriptors:
  - key: remote_address
    rate_limit: {name: per_ip, unit: minute, requests_per_unit: 3}
  - key: internal
    rate_limit: {unlimited: true}
`

// serve runs a real Sluice RLS server on a loopback port and returns a
// connection to it.
func serve(t *testing.T) *grpc.ClientConn {
	t.Helper()
	snap, err := rules.Parse("web.yaml", []byte(webRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	clock := storetest.NewClock()
	mem := memory.New(memory.Options{Now: clock.Now})
	t.Cleanup(func() { mem.Close() })
	engine, err := service.New(service.DefaultConfig(), service.StaticRules{Snapshot: snap}, mem, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	rls.New(engine, rls.Options{}).Register(g)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func TestMiddlewareOverGRPC(t *testing.T) {
	conn := serve(t)
	h, err := httplimit.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), httplimit.Config{
		Checker:     New(conn, Options{Timeout: 5 * time.Second}),
		Domain:      "web",
		Descriptors: [][]httplimit.KeyFunc{{httplimit.ClientIP("remote_address", nil)}, {httplimit.Header("internal", "X-Internal")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		internal   string
		wantCode   int
		wantLimit  string
		wantPolicy string
		wantRetry  string
	}{
		{"", 200, `"per_ip";r=2;t=60`, `"per_ip";q=3;w=60`, ""},
		{"yes", 200, `"per_ip";r=1;t=60`, `"per_ip";q=3;w=60`, ""}, // the unlimited status adds nothing
		{"", 200, `"per_ip";r=0;t=60`, `"per_ip";q=3;w=60`, ""},
		{"", 429, `"per_ip";r=0;t=60`, `"per_ip";q=3;w=60`, "60"},
	}
	for i, s := range steps {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "198.51.100.4:5"
		if s.internal != "" {
			r.Header.Set("X-Internal", s.internal)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != s.wantCode || w.Header().Get("RateLimit") != s.wantLimit ||
			w.Header().Get("RateLimit-Policy") != s.wantPolicy || w.Header().Get("Retry-After") != s.wantRetry {
			t.Errorf("step %d: %d RateLimit %q Policy %q Retry-After %q; want %d %q %q %q", i, w.Code,
				w.Header().Get("RateLimit"), w.Header().Get("RateLimit-Policy"), w.Header().Get("Retry-After"),
				s.wantCode, s.wantLimit, s.wantPolicy, s.wantRetry)
		}
	}
}

func TestServiceDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens here now
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := New(conn, Options{Timeout: 200 * time.Millisecond})
	_, err = c.Check(context.Background(), service.Request{Domain: "web", Descriptors: []service.Descriptor{{Entries: []rules.Entry{{Key: "k", Value: "v"}}}}})
	if err == nil {
		t.Fatal("Check against a closed port: no error")
	}
	var reported error
	h, _ := httplimit.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), httplimit.Config{
		Checker: c, Domain: "web", Descriptors: [][]httplimit.KeyFunc{{httplimit.Static("k", "v")}},
		OnError: func(_ *http.Request, err error) { reported = err },
	})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	if w.Code != 200 || reported == nil {
		t.Errorf("service down, fail open: status %d, reported %v; want 200 and an error reported", w.Code, reported)
	}
}

// TestInvalidRequestIs400: a key the server refuses as invalid
// (InvalidArgument: a value over its max-value-bytes) and a value that is
// not UTF-8 (refused before it is sent) are service.ErrInvalidRequest, so
// the middleware answers 400 although it fails open; before, both failed
// open and the request skipped every limit.
func TestInvalidRequestIs400(t *testing.T) {
	conn := serve(t)
	c := New(conn, Options{Timeout: 5 * time.Second})
	cases := []struct {
		name, value, want string
	}{
		{"over the server's limit", strings.Repeat("v", service.DefaultMaxValueBytes+1), "max-value-bytes=4096"},
		{"not UTF-8", "a\xffb", "descriptors[0].entries[0].value: not valid UTF-8"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Check(context.Background(), service.Request{Domain: "web", Descriptors: []service.Descriptor{{Entries: []rules.Entry{{Key: "remote_address", Value: tc.value}}}}})
			if !errors.Is(err, service.ErrInvalidRequest) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check: %v, want service.ErrInvalidRequest naming %q", err, tc.want)
			}
			var reported error
			h, err := httplimit.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), httplimit.Config{
				Checker: c, Domain: "web", Descriptors: [][]httplimit.KeyFunc{{httplimit.Header("remote_address", "X-Key")}},
				OnError: func(_ *http.Request, err error) { reported = err },
			})
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest("GET", "/", nil)
			r.Header.Set("X-Key", tc.value)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusBadRequest {
				t.Errorf("middleware, fail open: status %d (reported %v), want 400", w.Code, reported)
			}
		})
	}
	// A valid key still passes.
	if _, err := c.Check(context.Background(), service.Request{Domain: "web", Descriptors: []service.Descriptor{{Entries: []rules.Entry{{Key: "remote_address", Value: "198.51.100.9"}}}}}); err != nil {
		t.Errorf("Check of a valid key: %v, want nil", err)
	}
}
