package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/server/admin"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/stack"
)

// guardConfig is the admin surface's guards and the meaning of /readyz
// (docs/operations.md, "Admin surface and readiness").
type guardConfig struct {
	// AuthFailureLimit is how many failed authentications one client
	// address may make per AuthFailureWindow before it is answered 429;
	// 0 turns the limit off.
	AuthFailureLimit int
	// AuthFailureWindow is the period over which AuthFailureLimit
	// failures come back (one every window ÷ limit).
	AuthFailureWindow time.Duration
	// TrustedOrigins, comma-separated, may send state-changing admin
	// requests from a browser page of theirs.
	TrustedOrigins string
	// ReadyzStrict makes /readyz answer 503 while the store does not
	// answer (the behaviour before 0.x); by default /readyz stays 200
	// while the instance can decide by each limit's failure mode.
	ReadyzStrict bool
}

func defaultGuardConfig() guardConfig {
	return guardConfig{AuthFailureLimit: 10, AuthFailureWindow: time.Minute}
}

func (c *guardConfig) flags(fs *flag.FlagSet) {
	fs.IntVar(&c.AuthFailureLimit, "auth-failure-limit", c.AuthFailureLimit, "failed admin-token authentications allowed per client address per --auth-failure-window before 429 (0: no limit)")
	fs.DurationVar(&c.AuthFailureWindow, "auth-failure-window", c.AuthFailureWindow, "period over which --auth-failure-limit failures come back")
	fs.StringVar(&c.TrustedOrigins, "admin-trusted-origins", c.TrustedOrigins, "comma-separated origins (https://ops.example.com) whose browser pages may send state-changing admin requests; default: none but the server's own")
	fs.BoolVar(&c.ReadyzStrict, "readyz-strict", c.ReadyzStrict, "/readyz answers 503 while the store is down (default: 200 while each limit's failure mode can decide; the store's health is reported beside it)")
}

func (c guardConfig) validate(bad func(string, ...any)) {
	if c.AuthFailureLimit < 0 {
		bad("--auth-failure-limit: %d, want 0 (off) or more", c.AuthFailureLimit)
	}
	if c.AuthFailureLimit > 0 && (c.AuthFailureWindow < time.Second || c.AuthFailureWindow > stack.MaxWindow) {
		bad("--auth-failure-window: %v, want from 1s to %v", c.AuthFailureWindow, stack.MaxWindow)
	}
	for _, o := range c.origins() {
		if u, err := url.Parse(o); err != nil || u.Scheme == "" || u.Host == "" || u.Path != "" {
			bad("--admin-trusted-origins: %q, want scheme://host[:port]", o)
		}
	}
}

func (c guardConfig) origins() []string {
	var out []string
	for _, o := range strings.Split(c.TrustedOrigins, ",") {
		if o = strings.TrimSpace(o); o != "" {
			out = append(out, o)
		}
	}
	return out
}

// guardTokens sets up toks' failure handling: the metric
// sluice_auth_failures_total{reason}, a bounded log, and the limit per
// client address on its own in-process store (closed with the server).
func (s *server) guardTokens(toks *admin.Tokens, reg prometheus.Registerer, log *slog.Logger) error {
	failures := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_auth_failures_total",
		Help: "Admin-token authentications refused, by reason: missing, invalid, basic_on_write, cross_origin, throttled.",
	}, []string{"reason"})
	for _, r := range admin.FailReasons {
		failures.WithLabelValues(r)
	}
	reg.MustRegister(failures)
	opts := admin.GuardOptions{
		OnFailure:      func(reason string) { failures.WithLabelValues(reason).Inc() },
		Logger:         log,
		TrustedOrigins: s.cfg.Guard.origins(),
	}
	if n := s.cfg.Guard.AuthFailureLimit; n > 0 {
		// Its own store: the counters of clients' limits never share keys
		// or a cap with these, and a down Redis does not lift the limit.
		ms := memory.New(memory.Options{MaxKeys: 1 << 16})
		s.closers = append(s.closers, ms)
		lim, err := sluice.NewLimiter(ms, sluice.Limit{Algorithm: sluice.GCRA, Quota: int64(n), Window: s.cfg.Guard.AuthFailureWindow})
		if err != nil {
			return fmt.Errorf("serve: --auth-failure-limit: %w", err)
		}
		opts.Failures = lim
	}
	if err := toks.Guard(opts); err != nil {
		return fmt.Errorf("serve: --admin-trusted-origins: %w", err)
	}
	return nil
}

// storeUpGauge is sluice_store_up: 1 while the store answers a look (as
// /readyz reports it), probed at each scrape within a second.
func storeUpGauge(e *service.Engine) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_store_up",
		Help: "1 while the store answers (the store line of /readyz), else 0; /readyz stays 200 without --readyz-strict.",
	}, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if e.Ready(ctx) != nil {
			return 0
		}
		return 1
	})
}

// metricsHandlers returns /metrics for the debug listener (everything) and
// for the HTTP listener: there, the series of detailed_metric rules, whose
// rule label holds request values (API keys, addresses), are left out
// unless the scrape carries an admin token that may read.
func (s *server) metricsHandlers(reg prometheus.Gatherer, toks *admin.Tokens) (public, debug http.Handler) {
	full := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	filtered := promhttp.HandlerFor(ruleLabels{reg, s.watcher.Current}, promhttp.HandlerOpts{})
	if toks.Len() == 0 {
		return filtered, full
	}
	authed := toks.Read()(full)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			authed.ServeHTTP(w, r)
			return
		}
		filtered.ServeHTTP(w, r)
	}), full
}

// ruleLabels gathers g without the series whose rule label is neither a
// rule ID of the rules in force nor "override": those of detailed_metric
// rules, labelled with the request's descriptor values.
type ruleLabels struct {
	g     prometheus.Gatherer
	rules func() *rules.Snapshot
}

func (f ruleLabels) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := f.g.Gather()
	known := map[[2]string]bool{}
	for _, r := range f.rules().Rules() {
		known[[2]string{r.Domain, r.ID}] = true
		known[[2]string{"", r.ID}] = true // a family without a domain label
	}
	out := mfs[:0]
	for _, mf := range mfs {
		kept := mf.Metric[:0]
		for _, m := range mf.Metric {
			var domain, rule string
			hasRule := false
			for _, lp := range m.GetLabel() {
				switch lp.GetName() {
				case "domain":
					domain = lp.GetValue()
				case "rule":
					rule, hasRule = lp.GetValue(), true
				}
			}
			if hasRule && rule != "override" && !known[[2]string{domain, rule}] {
				continue
			}
			kept = append(kept, m)
		}
		if mf.Metric = kept; len(kept) > 0 {
			out = append(out, mf)
		}
	}
	return out, err
}
