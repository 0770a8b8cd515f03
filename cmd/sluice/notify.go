package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/notify"
	"github.com/sluice-rl/sluice/store/stack"
)

// notifyConfig is where the levels of rules' notify_at are told besides
// the metric and the log: a webhook.
type notifyConfig struct {
	// Webhook is the URL each firing is POSTed to; "" posts none.
	Webhook string
	// SecretFile holds the key that signs each body (required with
	// Webhook); secret is what it holds, read by loadSecrets.
	SecretFile string
	secret     []byte
}

// minNotifySecret is the shortest webhook secret accepted, in bytes.
const minNotifySecret = 16

func (c *notifyConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Webhook, "notify-webhook", c.Webhook, "URL each notify_at level that fires is POSTed to (JSON, signed in the Sluice-Signature header, retried with backoff); empty: none")
	fs.StringVar(&c.SecretFile, "notify-secret-file", c.SecretFile, "file holding the key (at least 16 bytes) that signs the --notify-webhook bodies (HMAC-SHA256); required with --notify-webhook, never logged")
}

func (c notifyConfig) validate(bad func(string, ...any)) {
	if c.Webhook == "" {
		if c.SecretFile != "" {
			bad("--notify-secret-file: given without --notify-webhook")
		}
		return
	}
	if u, err := url.Parse(c.Webhook); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("--notify-webhook: want an http or https URL with a host")
	}
	if c.SecretFile == "" {
		bad("--notify-secret-file: required with --notify-webhook (the key that signs each body)")
	} else if len(c.secret) < minNotifySecret {
		bad("--notify-secret-file: %s holds %d bytes, want at least %d", c.SecretFile, len(c.secret), minNotifySecret)
	}
}

// load reads SecretFile (surrounding white space trimmed).
func (c *notifyConfig) load() error {
	if c.SecretFile == "" {
		return nil
	}
	b, err := os.ReadFile(c.SecretFile)
	if err != nil {
		return fmt.Errorf("--notify-secret-file: %w", err)
	}
	c.secret = []byte(strings.TrimSpace(string(b)))
	return nil
}

// secrets are what of c must not be shown: the key, and the webhook URL's
// user info and query (where a receiver's token often is).
func (c notifyConfig) secrets() []string {
	var out []string
	if len(c.secret) > 0 {
		out = append(out, string(c.secret))
	}
	out = append(out, urlSecrets(c.Webhook)...)
	if u, err := url.Parse(c.Webhook); err == nil && len(u.RawQuery) >= 3 {
		out = append(out, u.RawQuery)
	}
	return out
}

// newNotifier builds the Notifier of the engine: claims in the store
// (which must be a stack.Claimer), the log in PostgreSQL's audit table
// when there is one (else the last notify.DefaultKeep in memory), the
// webhook when configured; its metrics in reg.
func (s *server) newNotifier(reg prometheus.Registerer, log *slog.Logger) (*notify.Notifier, error) {
	cl, ok := s.store.(stack.Claimer)
	if !ok {
		return nil, errors.New("serve: notify: the store cannot claim (stack.Claimer)")
	}
	o := notify.Options{Claimer: cl, Logger: log}
	if s.pg != nil {
		o.Log = notify.AuditLog{A: s.pg}
	}
	c := s.cfg.Notify
	if c.Webhook != "" {
		w, err := notify.NewWebhook(notify.WebhookOptions{URL: c.Webhook, Secret: c.secret, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("serve: %w", err)
		}
		o.Webhook = w
	}
	n, err := notify.New(o)
	if err != nil {
		if o.Webhook != nil {
			o.Webhook.Close()
		}
		return nil, fmt.Errorf("serve: %w", err)
	}
	reg.MustRegister(newNotifyCollector(n))
	return n, nil
}

// notifyCollector exports a Notifier's Stats. Labels are bounded by the
// rule files: domain, rule ID and level, as sluice_decisions_total's
// (never a request's values); queue takes two values.
type notifyCollector struct {
	n                                               *notify.Notifier
	fired, heard, dropped, held, claimErrs, logErrs *prometheus.Desc
	sent, failures, gaveUp                          *prometheus.Desc
}

func newNotifyCollector(n *notify.Notifier) *notifyCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("sluice_notify_"+name, help, labels, nil)
	}
	return &notifyCollector{
		n:         n,
		fired:     d("fired_total", "notify_at levels this instance told (it won the fleet's claim for the period), by domain, rule and level.", "domain", "rule", "level"),
		heard:     d("crossings_total", "notify_at levels the engine saw crossed (before the claim)."),
		dropped:   d("dropped_total", "Crossings (queue claim) or firings (queue webhook) dropped because their queue was full.", "queue"),
		held:      d("claimed_elsewhere_total", "Crossings not told: the level was claimed for the period already (by another instance, or earlier)."),
		claimErrs: d("claim_errors_total", "Crossings not told because their claim in the store failed."),
		logErrs:   d("log_errors_total", "Fired levels the log (the audit table, or memory) failed to keep."),
		sent:      d("webhook_sent_total", "Firings the webhook accepted (2xx)."),
		failures:  d("webhook_failures_total", "Webhook tries that failed (no answer, or a status not 2xx)."),
		gaveUp:    d("webhook_given_up_total", "Firings the webhook never accepted: attempts spent, or refused with a 4xx."),
	}
}

func (c *notifyCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.fired, c.heard, c.dropped, c.held, c.claimErrs, c.logErrs, c.sent, c.failures, c.gaveUp} {
		ch <- d
	}
}

func (c *notifyCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.n.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for l, v := range st.Fired {
		counter(c.fired, v, l.Domain, l.Rule, strconv.Itoa(l.Level))
	}
	counter(c.heard, st.Heard)
	counter(c.dropped, st.Dropped, "claim")
	counter(c.dropped, st.Webhook.Dropped, "webhook")
	counter(c.held, st.Held)
	counter(c.claimErrs, st.ClaimErrors)
	counter(c.logErrs, st.LogErrors)
	counter(c.sent, st.Webhook.Sent)
	counter(c.failures, st.Webhook.Failures)
	counter(c.gaveUp, st.Webhook.GaveUp)
}
