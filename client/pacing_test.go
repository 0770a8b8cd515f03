package client

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeBase answers with headers chosen per request by fn, without a network.
type fakeBase struct {
	mu sync.Mutex
	n  int
	fn func(n int, r *http.Request) (int, http.Header)
}

func (f *fakeBase) RoundTrip(r *http.Request) (*http.Response, error) {
	f.mu.Lock()
	f.n++
	n := f.n
	f.mu.Unlock()
	code, h := f.fn(n, r)
	if h == nil {
		h = http.Header{}
	}
	return &http.Response{StatusCode: code, Header: h, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
}

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func get(t *testing.T, tr *Transport, url string) int {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestPacingSpreadsRemaining(t *testing.T) {
	base := &fakeBase{fn: func(n int, _ *http.Request) (int, http.Header) {
		if n == 1 {
			return 200, hdr("RateLimit", `"p";r=4;t=2`, "RateLimit-Policy", `"p";q=5;w=2`)
		}
		return 200, nil // nothing new: the client keeps its own estimate
	}}
	tr := &Transport{Base: base, Pacing: true}
	ft := newFakeTime(tr, 0)
	for i := 0; i < 7; i++ {
		get(t, tr, "http://api.test/x")
	}
	// 4 left over 2s: at 0, 0.5, 1, 1.5; then a fresh window of 5 over 2s
	// starting at the reset: 2, 2.4.
	want := []time.Duration{500 * time.Millisecond, 500 * time.Millisecond, 500 * time.Millisecond, 500 * time.Millisecond, 400 * time.Millisecond}
	if got := ft.slept(); !equalDurations(got, want) {
		t.Errorf("pacing sleeps = %v, want %v", got, want)
	}
}

func TestPacingKeysByPolicyAndHost(t *testing.T) {
	base := &fakeBase{fn: func(_ int, r *http.Request) (int, http.Header) {
		switch {
		case r.URL.Host == "api.test" && r.URL.Path == "/a":
			return 200, hdr("RateLimit", `"a";r=0;t=10`)
		case r.URL.Host == "api.test" && r.URL.Path == "/b":
			return 200, hdr("RateLimit", `"b";r=50;t=10`)
		}
		return 200, hdr("RateLimit", `"a";r=100;t=10`)
	}}
	tr := &Transport{Base: base, Pacing: true}
	ft := newFakeTime(tr, 0)
	steps := []struct {
		url  string
		want time.Duration // sleep before this request
	}{
		{"http://api.test/a", 0},                // learns: a is exhausted for 10s
		{"http://api.test/b", 0},                // b is another bucket
		{"http://other.test/a", 0},              // another host
		{"http://api.test/b", 0},                // b has room
		{"http://api.test/a", 10 * time.Second}, // waits for a's reset
	}
	for i, s := range steps {
		before := len(ft.slept())
		get(t, tr, s.url)
		var slept time.Duration
		for _, d := range ft.slept()[before:] {
			slept += d
		}
		if slept != s.want {
			t.Errorf("step %d: GET %s slept %v, want %v", i, s.url, slept, s.want)
		}
	}
}

func TestPacingRetryAfterBlocksHost(t *testing.T) {
	base := &fakeBase{fn: func(n int, _ *http.Request) (int, http.Header) {
		if n == 1 {
			return 503, hdr("Retry-After", "4")
		}
		return 200, nil
	}}
	tr := &Transport{Base: base, Pacing: true, MaxAttempts: 1}
	ft := newFakeTime(tr, 0)
	if code := get(t, tr, "http://api.test/a"); code != 503 {
		t.Fatalf("first GET = %d, want 503 (no retries)", code)
	}
	get(t, tr, "http://api.test/other")
	if got, want := ft.slept(), []time.Duration{4 * time.Second}; !equalDurations(got, want) {
		t.Errorf("after Retry-After without policies, next request slept %v, want %v", got, want)
	}
	get(t, tr, "http://other.test/a")
	if got := len(ft.slept()); got != 1 {
		t.Errorf("another host slept too: %v", ft.slept())
	}
}

func TestPacingIgnoresMalformed(t *testing.T) {
	base := &fakeBase{fn: func(int, *http.Request) (int, http.Header) {
		return 200, hdr("RateLimit", `"p";r=0;t=100,`) // trailing comma: malformed
	}}
	tr := &Transport{Base: base, Pacing: true}
	ft := newFakeTime(tr, 0)
	for i := 0; i < 3; i++ {
		get(t, tr, "http://api.test/x")
	}
	if got := ft.slept(); len(got) != 0 {
		t.Errorf("malformed RateLimit changed pacing: slept %v, want nothing", got)
	}
}

func TestPacingIgnoresConcurrencyPolicies(t *testing.T) {
	base := &fakeBase{fn: func(int, *http.Request) (int, http.Header) {
		return 200, hdr("RateLimit", `"inflight";r=1, "no_reset";r=1`,
			"RateLimit-Policy", `"inflight";q=50;qu="concurrent-requests"`)
	}}
	tr := &Transport{Base: base, Pacing: true}
	ft := newFakeTime(tr, 0)
	for i := 0; i < 5; i++ {
		get(t, tr, "http://api.test/x")
	}
	if got := ft.slept(); len(got) != 0 {
		t.Errorf("a concurrency policy and a policy without t or w paced requests: slept %v, want nothing", got)
	}
}
