package xds

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	rlconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/sluice-rl/sluice/rules"
)

// vclock is a clock for Client.After: a wait that ends within the span
// fires at once and moves the clock on by its length; the first one that
// would end past it is held until release.
type vclock struct {
	mu    sync.Mutex
	now   time.Duration // since the start
	span  time.Duration // waits ending after this are held
	waits []time.Duration
	held  chan time.Time // the held wait's channel, nil when none
	heldD time.Duration
}

func (v *vclock) After(d time.Duration) <-chan time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.waits = append(v.waits, d)
	ch := make(chan time.Time, 1)
	if v.now+d <= v.span {
		v.now += d
		ch <- time.Time{}
		return ch
	}
	v.held, v.heldD = ch, d
	return ch
}

// holding reports whether a wait is held and how many waits were asked
// for so far.
func (v *vclock) holding() (held bool, waits int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.held != nil, len(v.waits)
}

// release fires the held wait (moving the clock to its end) and lets
// waits run for extra beyond it.
func (v *vclock) release(t *testing.T, extra time.Duration) {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.held == nil {
		t.Fatal("release: no wait held")
	}
	v.now += v.heldD
	v.span = v.now + extra
	v.held <- time.Time{}
	v.held = nil
}

func (v *vclock) waitsSince(i int) []time.Duration {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]time.Duration(nil), v.waits[i:]...)
}

// logBuffer collects a JSON slog handler's records.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// errors returns the messages and versions of the ERROR records so far.
func (b *logBuffer) errors(t *testing.T) (msgs []string, versions []string) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for line := range strings.Lines(b.buf.String()) {
		var rec struct{ Level, Msg, Version, Err string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec.Level == "ERROR" {
			msgs = append(msgs, rec.Msg+": "+rec.Err)
			versions = append(versions, rec.Version)
		}
	}
	return msgs, versions
}

// badConfig is a RateLimitConfig the rules reject: an unknown unit.
func badConfig(name, domain string) *rlconf.RateLimitConfig {
	c := config(name, domain, 1)
	c.Descriptors[0].RateLimit.Unit = rlconf.RateLimitUnit_UNKNOWN
	return c
}

// nominalWait is the NACK backoff before jitter with the defaults (1s
// doubling up to 1m): the k-th repeat of a rejected set waits between half
// of it and all of it.
func nominalWait(k int) time.Duration {
	d := time.Second
	for range k {
		d = min(2*d, time.Minute)
	}
	return d
}

// checkWaits fails unless each of got lies in [d/2, d] of the nominal
// waits from the k-th on.
func checkWaits(t *testing.T, what string, got []time.Duration, k int) {
	t.Helper()
	for i, w := range got {
		d := nominalWait(k + i)
		if w < d/2 || w > d {
			t.Errorf("%s: wait %d = %v, want within [%v, %v]", what, i, w, d/2, d)
		}
	}
}

// TestNACKBackoff: go-control-plane's snapshot cache answers a NACK at
// once with the set it rejects (the NACK carries the previous version, not
// the snapshot's). With the client's default NACK backoff (1s doubling up to
// 1m, jittered to [d/2, d]) on a virtual clock, 10 minutes of a bad set
// cost the server between 15 and 25 requests (without the backoff the
// client answered at once: thousands a second), each a NACK of the
// version in force, and
// one ERROR log line. A new bad set is judged and NACKed at once when it
// arrives; a good one is applied at once and resets the backoff.
func TestNACKBackoff(t *testing.T) {
	const span = 10 * time.Minute
	m := startMgmt(t, "127.0.0.1:0")
	m.set(t, "v1", config("a", "alpha", 3))

	var logs logBuffer
	c, err := New(m.addr, node, rules.Options{}, slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	vc := &vclock{}
	c.After = vc.After
	var updates []string
	var updMu sync.Mutex
	c.OnUpdate = func(v string, err error) {
		updMu.Lock()
		defer updMu.Unlock()
		updates = append(updates, v)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil after cancel", err)
		}
	}()
	eventually(t, "v1 ACKed", func() bool { a, _ := m.seen(); return len(a) > 0 && a[len(a)-1] == "v1" })
	if held, n := vc.holding(); held || n != 0 {
		t.Fatalf("after v1: held %v, %d waits; want no wait", held, n)
	}

	// 1. A bad set for 10 virtual minutes.
	vc.mu.Lock()
	vc.span = vc.now + span
	vc.mu.Unlock()
	from := len(m.requests())
	m.set(t, "v2", badConfig("a", "alpha"))
	eventually(t, "a wait held past 10 minutes", func() bool { held, _ := vc.holding(); return held })
	reqs := m.requests()[from:]
	waits := vc.waitsSince(0)
	fired := len(waits) - 1 // the last is held
	t.Logf("10 virtual minutes of a bad set: %d requests, waits %v", len(reqs), waits)
	if len(reqs) < 15 || len(reqs) > 25 {
		t.Errorf("requests in %v of a bad set = %d, want 15 to 25", span, len(reqs))
	}
	if len(reqs) != 1+fired {
		t.Errorf("requests = %d, want %d (the first NACK at once, then one per wait)", len(reqs), 1+fired)
	}
	checkWaits(t, "bad v2", waits, 0)
	for i, r := range reqs {
		if r.version != "v1" || !strings.Contains(r.nack, `version "v2"`) || !strings.Contains(r.nack, `unknown unit "unknown"`) {
			t.Errorf("request %d = version %q, error_detail %q; want a NACK of v2 (unknown unit) from v1", i, r.version, r.nack)
		}
	}
	msgs, versions := logs.errors(t)
	if len(msgs) != 1 || versions[0] != "v2" || !strings.Contains(msgs[0], `unknown unit "unknown"`) {
		t.Errorf("ERROR log records = %q (versions %q), want one for v2 saying what was wrong", msgs, versions)
	}
	if got := c.Version(); got != "v1" {
		t.Errorf("version = %q, want v1 in force", got)
	}
	if err := c.LastError(); err == nil || !strings.Contains(err.Error(), `version "v2"`) {
		t.Errorf("LastError = %v, want v2's problem", err)
	}

	// 2. Another bad set arrives when the held wait ends (the server can
	// only answer a request): it is judged and NACKed at once, logged once,
	// and its repeat waits on, the backoff still at its height (only an
	// ACK resets it).
	m.set(t, "v3", badConfig("b", "beta"))
	from, w0 := len(m.requests()), len(vc.waitsSince(0))
	vc.release(t, 0)
	eventually(t, "v3's repeat held", func() bool { held, n := vc.holding(); return held && n > w0 })
	reqs = m.requests()[from:]
	if len(reqs) != 2 || !strings.Contains(reqs[0].nack, `version "v2"`) || !strings.Contains(reqs[1].nack, `version "v3"`) || !strings.Contains(reqs[1].nack, "xds:b:") {
		t.Errorf("requests after the held wait = %+v, want v2's NACK, then v3's at once", reqs)
	}
	if got := vc.waitsSince(w0); len(got) != 1 || got[0] < 30*time.Second {
		t.Errorf("waits after v3 = %v, want one of at least 30s (the backoff not reset by a NACK)", got)
	}
	if msgs, versions = logs.errors(t); len(msgs) != 2 || versions[1] != "v3" {
		t.Errorf("ERROR log records = %q (versions %q), want a second one, for v3", msgs, versions)
	}

	// 3. A good set is applied as soon as it can arrive, ACKed, and resets
	// the backoff: the next bad set's repeat waits 1s again.
	m.set(t, "v4", config("a", "alpha", 7))
	vc.release(t, 0)
	eventually(t, "v4 ACKed", func() bool { a, _ := m.seen(); return len(a) > 0 && a[len(a)-1] == "v4" })
	if got := c.Version(); got != "v4" || c.LastError() != nil {
		t.Errorf("after v4: version %q, LastError %v; want v4, nil", got, c.LastError())
	}
	if r := c.Current().RuleByName("alpha", "per-user"); r == nil {
		t.Fatal("after v4: alpha/per-user missing")
	}
	w0 = len(vc.waitsSince(0))
	m.set(t, "v5", badConfig("a", "alpha"))
	eventually(t, "v5's repeat held", func() bool { held, n := vc.holding(); return held && n > w0 })
	checkWaits(t, "bad v5 after the good v4", vc.waitsSince(w0), 0)
	if msgs, versions = logs.errors(t); len(msgs) != 3 || versions[2] != "v5" {
		t.Errorf("ERROR log records = %q (versions %q), want a third one, for v5", msgs, versions)
	}
	updMu.Lock()
	if got := strings.Join(updates, ","); got != "v1,v2,v3,v4,v5" {
		t.Errorf("OnUpdate versions = %s, want v1,v2,v3,v4,v5 (each set judged once)", got)
	}
	updMu.Unlock()
}
