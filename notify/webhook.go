package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// SignatureHeader is the header that carries a webhook body's signature:
// "t=<unix seconds>,v1=<hex HMAC-SHA256 of the secret over t + "." +
// body>" (Sign, Verify).
const SignatureHeader = "Sluice-Signature"

// Sign returns the SignatureHeader value of body sent at t with secret.
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// ErrSignature: a webhook body's signature does not verify.
var ErrSignature = errors.New("notify: bad webhook signature")

// Verify checks header (a SignatureHeader value) against body and secret,
// and that its time is within tolerance of now (a replayed old body is
// refused); a receiver's check, in constant time. Errors wrap
// ErrSignature.
func Verify(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var ts, sig string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = v
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sig == "" {
		return fmt.Errorf("%w: want t=…,v1=…", ErrSignature)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: signed %v from now, beyond %v", ErrSignature, d, tolerance)
	}
	got, err := hex.DecodeString(sig)
	if err != nil || !hmac.Equal(got, mac(secret, ts, body)) {
		return fmt.Errorf("%w: v1 does not match the body", ErrSignature)
	}
	return nil
}

// WebhookOptions configure a Webhook. URL and Secret are required.
type WebhookOptions struct {
	// URL is where each firing is POSTed (http or https).
	URL string
	// Secret signs each body (SignatureHeader). It is never logged.
	Secret []byte
	// Client sends the requests. Default: one with a 10s timeout.
	Client *http.Client
	// Queue bounds the firings waiting to be sent (default DefaultQueue);
	// one that finds it full is dropped and counted.
	Queue int
	// Attempts bounds the tries of one firing (default DefaultAttempts):
	// a failed try (no answer, or 408, 429 or 5xx) is retried after
	// Backoff, until the attempts are spent; any other 4xx is not retried.
	Attempts int
	// Backoff is the wait before try n+1 after n failed ones (default:
	// 1s × 2^(n−1), at most 1m, with jitter: a random half of it added to
	// the other half).
	Backoff func(failed int) time.Duration
	// Sleep waits d or until ctx ends (default: a timer); tests pass a
	// controllable one.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now is the clock of the signatures (default time.Now).
	Now func() time.Time
	// Logger receives failures (the URL's host only). Default: none.
	Logger *slog.Logger
}

// Webhook posts firings to a URL, signed, retried with exponential
// backoff and jitter, from one goroutine of its own: Send never blocks.
// Create it with NewWebhook, Close it when done.
type Webhook struct {
	o      WebhookOptions
	host   string
	log    *slog.Logger
	queue  chan Fired
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	sent, failures, gaveUp, dropped atomic.Uint64
}

// WebhookStats are a Webhook's counters since NewWebhook.
type WebhookStats struct {
	// Sent counts firings the URL accepted (2xx); Failures failed tries;
	// GaveUp firings given up (attempts spent, or a 4xx); Dropped firings
	// a full queue refused.
	Sent, Failures, GaveUp, Dropped uint64
}

// NewWebhook checks o and starts the sender.
func NewWebhook(o WebhookOptions) (*Webhook, error) {
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("notify: webhook URL: want an http or https URL with a host")
	}
	if len(o.Secret) == 0 {
		return nil, errors.New("notify: webhook secret: empty, want the key that signs each body")
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if o.Queue <= 0 {
		o.Queue = DefaultQueue
	}
	if o.Attempts <= 0 {
		o.Attempts = DefaultAttempts
	}
	if o.Backoff == nil {
		o.Backoff = Backoff
	}
	if o.Sleep == nil {
		o.Sleep = sleep
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	w := &Webhook{o: o, host: u.Host, log: o.Logger, queue: make(chan Fired, o.Queue), done: make(chan struct{})}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	go w.run()
	return w, nil
}

// Backoff is the default WebhookOptions.Backoff: 1s × 2^(failed−1), at
// most 1m, half of it random.
func Backoff(failed int) time.Duration {
	d := time.Minute
	if failed >= 1 && failed <= 7 {
		d = min(time.Second<<(failed-1), time.Minute)
	}
	return d/2 + rand.N(d/2+1)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Send queues f, or drops and counts it when the queue is full.
func (w *Webhook) Send(f Fired) {
	select {
	case w.queue <- f:
	default:
		w.dropped.Add(1)
	}
}

// Stats returns the counters.
func (w *Webhook) Stats() WebhookStats {
	return WebhookStats{Sent: w.sent.Load(), Failures: w.failures.Load(), GaveUp: w.gaveUp.Load(), Dropped: w.dropped.Load()}
}

// Close stops the sender: a try in flight or a backoff is cut short, and
// what is queued is not sent.
func (w *Webhook) Close() {
	w.once.Do(func() {
		w.cancel()
		<-w.done
	})
}

func (w *Webhook) run() {
	defer close(w.done)
	for {
		select {
		case <-w.ctx.Done():
			return
		case f := <-w.queue:
			w.deliver(f)
		}
	}
}

// deliver tries f until it is accepted, refused for good, or the
// attempts are spent.
func (w *Webhook) deliver(f Fired) {
	body, err := json.Marshal(f)
	if err != nil {
		w.gaveUp.Add(1)
		return
	}
	for try := 1; ; try++ {
		retry, err := w.post(body)
		if err == nil {
			w.sent.Add(1)
			return
		}
		w.failures.Add(1)
		if w.ctx.Err() != nil {
			return
		}
		if !retry || try >= w.o.Attempts {
			w.gaveUp.Add(1)
			w.log.Warn("notify: webhook gave up", "host", w.host, "id", f.ID, "tries", try, "err", err)
			return
		}
		if w.o.Sleep(w.ctx, w.o.Backoff(try)) != nil {
			return
		}
	}
}

// post sends body once; retry says whether a failure may pass.
func (w *Webhook) post(body []byte) (retry bool, err error) {
	req, err := http.NewRequestWithContext(w.ctx, http.MethodPost, w.o.URL, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(SignatureHeader, Sign(w.o.Secret, w.o.Now(), body))
	resp, err := w.o.Client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL may carry a token: not in the error
		}
		return true, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		return false, nil
	case c == http.StatusRequestTimeout || c == http.StatusTooManyRequests || c >= 500:
		return true, fmt.Errorf("status %d", c)
	default:
		return false, fmt.Errorf("status %d", c)
	}
}
