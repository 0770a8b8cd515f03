package notify

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var testSecret = []byte("s3cret-for-tests")

// receiver is a real HTTP server answering each POST with the next
// status of its script (the last one repeated), keeping what it got.
type receiver struct {
	srv      *httptest.Server
	mu       sync.Mutex
	statuses []int
	got      []received
	hold     chan struct{} // when set, each request waits for it
	entered  chan struct{} // when set, told of each request
}

type received struct {
	body []byte
	sig  string
	ct   string
}

func newReceiver(t *testing.T, statuses ...int) *receiver {
	r := &receiver{statuses: statuses}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		if r.entered != nil {
			r.entered <- struct{}{}
		}
		if r.hold != nil {
			<-r.hold
		}
		r.mu.Lock()
		r.got = append(r.got, received{body, req.Header.Get(SignatureHeader), req.Header.Get("Content-Type")})
		st := r.statuses[min(len(r.got)-1, len(r.statuses)-1)]
		r.mu.Unlock()
		w.WriteHeader(st)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) requests() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

// waitFor polls cond with a generous deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s after 20s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// sleeps is a controllable WebhookOptions.Sleep: it records each wait
// asked for and returns at once.
type sleeps struct {
	mu  sync.Mutex
	got []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.got = append(s.got, d)
	s.mu.Unlock()
	return ctx.Err()
}

func testFired() Fired {
	return Fired{ID: "abc", Domain: "llm", Rule: "team", Key: "team=a", Level: 80, Limit: 10, Used: 8,
		PeriodEnd: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), FiredAt: time.Date(2026, 11, 28, 15, 0, 0, 0, time.UTC)}
}

func newTestWebhook(t *testing.T, o WebhookOptions) *Webhook {
	t.Helper()
	w, err := NewWebhook(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

// A firing arrives as the JSON the docs give, signed: the signature
// verifies with the secret, and not with another secret, another body
// or a stale time.
func TestWebhookSigned(t *testing.T) {
	r := newReceiver(t, 204)
	now := time.Date(2026, 11, 28, 15, 0, 5, 0, time.UTC)
	w := newTestWebhook(t, WebhookOptions{URL: r.srv.URL + "/hook", Secret: testSecret, Now: func() time.Time { return now }})
	w.Send(testFired())
	waitFor(t, "the webhook's delivery", func() bool { return w.Stats().Sent == 1 })
	got := r.requests()
	if len(got) != 1 {
		t.Fatalf("%d requests, want 1", len(got))
	}
	g := got[0]
	if g.ct != "application/json" {
		t.Errorf("Content-Type %q", g.ct)
	}
	var m map[string]any
	if err := json.Unmarshal(g.body, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "domain", "rule", "key", "level", "limit", "used", "period_end", "fired_at"} {
		if _, ok := m[k]; !ok {
			t.Errorf("body %s lacks %q", g.body, k)
		}
	}
	if m["period_end"] != "2026-12-01T00:00:00Z" || m["level"] != float64(80) || m["key"] != "team=a" {
		t.Errorf("body %s", g.body)
	}
	if err := Verify(testSecret, g.sig, g.body, now, 5*time.Minute); err != nil {
		t.Errorf("Verify(%q): %v", g.sig, err)
	}
	for name, err := range map[string]error{
		"another secret": Verify([]byte("other"), g.sig, g.body, now, 5*time.Minute),
		"another body":   Verify(testSecret, g.sig, append([]byte(" "), g.body...), now, 5*time.Minute),
		"stale":          Verify(testSecret, g.sig, g.body, now.Add(time.Hour), 5*time.Minute),
		"no signature":   Verify(testSecret, "", g.body, now, 5*time.Minute),
	} {
		if !errors.Is(err, ErrSignature) {
			t.Errorf("Verify with %s: %v, want ErrSignature", name, err)
		}
	}
}

// 500s are retried after the backoff, each failed try counted, until
// the URL accepts; a 4xx is not retried; spent attempts give up.
func TestWebhookRetries(t *testing.T) {
	backoff := func(n int) time.Duration { return time.Duration(n) * time.Hour }
	t.Run("500 twice then 200", func(t *testing.T) {
		r := newReceiver(t, 500, 503, 200)
		s := &sleeps{}
		w := newTestWebhook(t, WebhookOptions{URL: r.srv.URL, Secret: testSecret, Backoff: backoff, Sleep: s.sleep})
		w.Send(testFired())
		waitFor(t, "the delivery", func() bool { return w.Stats().Sent == 1 })
		if st := w.Stats(); st.Failures != 2 || st.GaveUp != 0 {
			t.Errorf("stats %+v, want 2 failures", st)
		}
		if n := len(r.requests()); n != 3 {
			t.Errorf("%d requests, want 3", n)
		}
		if want := []time.Duration{time.Hour, 2 * time.Hour}; len(s.got) != 2 || s.got[0] != want[0] || s.got[1] != want[1] {
			t.Errorf("waited %v, want %v (the backoff of 1 then 2 failures)", s.got, want)
		}
		// Every try is signed anew and the same body is sent.
		got := r.requests()
		if string(got[0].body) != string(got[2].body) {
			t.Error("a retry sent another body")
		}
	})
	t.Run("attempts spent", func(t *testing.T) {
		r := newReceiver(t, 500)
		s := &sleeps{}
		w := newTestWebhook(t, WebhookOptions{URL: r.srv.URL, Secret: testSecret, Attempts: 3, Backoff: backoff, Sleep: s.sleep})
		w.Send(testFired())
		waitFor(t, "giving up", func() bool { return w.Stats().GaveUp == 1 })
		if st := w.Stats(); st.Failures != 3 || st.Sent != 0 {
			t.Errorf("stats %+v, want 3 failures, none sent", st)
		}
		if n := len(r.requests()); n != 3 {
			t.Errorf("%d requests, want 3", n)
		}
	})
	t.Run("400 not retried", func(t *testing.T) {
		r := newReceiver(t, 400)
		w := newTestWebhook(t, WebhookOptions{URL: r.srv.URL, Secret: testSecret, Sleep: (&sleeps{}).sleep})
		w.Send(testFired())
		waitFor(t, "giving up", func() bool { return w.Stats().GaveUp == 1 })
		if st := w.Stats(); st.Failures != 1 {
			t.Errorf("stats %+v, want 1 failure", st)
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		r := newReceiver(t, 200)
		url := r.srv.URL
		r.srv.Close()
		w := newTestWebhook(t, WebhookOptions{URL: url, Secret: testSecret, Attempts: 2, Sleep: (&sleeps{}).sleep})
		w.Send(testFired())
		waitFor(t, "giving up", func() bool { return w.Stats().GaveUp == 1 })
		if st := w.Stats(); st.Failures != 2 {
			t.Errorf("stats %+v, want 2 failures", st)
		}
	})
}

// The default backoff doubles from 1s to at most 1m, a random half of
// it added to the other half.
func TestBackoff(t *testing.T) {
	for n, base := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 7: time.Minute, 40: time.Minute} {
		for range 100 {
			if d := Backoff(n); d < base/2 || d > base {
				t.Fatalf("Backoff(%d) = %v, want in [%v, %v]", n, d, base/2, base)
			}
		}
	}
}

// Send never blocks: with the URL holding one request and the queue
// full, further firings are dropped and counted; the queued ones are
// sent once the URL answers.
func TestWebhookQueueFull(t *testing.T) {
	r := newReceiver(t, 200)
	r.hold, r.entered = make(chan struct{}), make(chan struct{}, 16)
	w := newTestWebhook(t, WebhookOptions{URL: r.srv.URL, Secret: testSecret, Queue: 2})
	w.Send(testFired())
	<-r.entered // the first is in flight, held
	var done atomic.Bool
	go func() {
		for range 7 {
			w.Send(testFired())
		}
		done.Store(true)
	}()
	waitFor(t, "seven Sends to return", done.Load)
	if st := w.Stats(); st.Dropped != 5 {
		t.Errorf("dropped %d, want 5 (2 queued behind the one in flight)", st.Dropped)
	}
	close(r.hold)
	waitFor(t, "the queued firings", func() bool { return w.Stats().Sent == 3 })
}

func TestNewWebhookRefuses(t *testing.T) {
	for _, o := range []WebhookOptions{
		{URL: "", Secret: testSecret},
		{URL: "ftp://x/y", Secret: testSecret},
		{URL: "http://x/y"},
	} {
		if _, err := NewWebhook(o); err == nil {
			t.Errorf("NewWebhook(%q, secret %d bytes): no error", o.URL, len(o.Secret))
		}
	}
}
