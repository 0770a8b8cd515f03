package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/httplimit"
	"github.com/sluice-rl/sluice/httplimit/gateway"
	"github.com/sluice-rl/sluice/httplimit/remote"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/rules/watch"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/shed"
	"github.com/sluice-rl/sluice/store/compose"
	"github.com/sluice-rl/sluice/store/redis"
)

func init() {
	register("proxy", "rate-limit an existing HTTP API: sluice proxy --upstream URL --rules DIR --listen ADDR", runProxy)
}

// defaultProxyListen is where `sluice proxy` listens when neither --listen
// nor the config file says.
const defaultProxyListen = "127.0.0.1:8080"

// specList is a repeatable string flag.
type specList []string

func (s *specList) String() string { return strings.Join(*s, "; ") }
func (s *specList) Set(v string) error {
	*s = append(*s, v)
	return nil
}

func runProxy(ctx context.Context, args []string, getenv env, stdout, stderr io.Writer) error {
	var (
		configFile, upstream, rulesDir, rlsAddr, listen, domain, trusted, algo, logLevel string
		metricsAddr, shedRedis, failureMode                                              string
		descriptors                                                                      specList
		legacy, failClosed                                                               bool
		maxDelay                                                                         time.Duration
		inflight                                                                         int64
		rlsTLS                                                                           clientTLSConfig
	)
	fs := newFlagSet("proxy", stderr)
	fs.StringVar(&configFile, "config", "", "YAML file with the settings below (flags win over it)")
	fs.StringVar(&upstream, "upstream", "", "URL of the API to forward to (required)")
	fs.StringVar(&rulesDir, "rules", "", "directory of rule files, applied in process and reloaded on change")
	fs.StringVar(&rlsAddr, "rls", "", "host:port of a rate limit service (sluice serve --grpc-addr) to ask instead of --rules")
	rlsTLS.flags(fs, "rls-", "the --rls service")
	fs.StringVar(&listen, "listen", "", "address to serve on (default "+defaultProxyListen+", loopback only; :8080 for every interface)")
	fs.StringVar(&domain, "domain", "", "rule domain to apply (required)")
	fs.StringVar(&trusted, "trusted-proxies", "", "comma-separated CIDRs whose X-Forwarded-For/Forwarded are believed (default: none)")
	fs.Var(&descriptors, "descriptor", "descriptor spec, repeatable: key=ip|ipnet:V4:V6|route|method|header:NAME|static:VALUE[, …] (default remote_address=ip)")
	fs.BoolVar(&legacy, "legacy-headers", false, "also send X-RateLimit-Limit/-Remaining/-Reset/-Used")
	fs.BoolVar(&failClosed, "fail-closed", false, "same as --failure-mode closed")
	fs.StringVar(&failureMode, "failure-mode", "", "when the limiter cannot decide (--rls unreachable): open lets requests through, closed answers 503 (default open)")
	fs.DurationVar(&maxDelay, "max-delay", 0, "longest leaky_bucket queueing delay before answering 503 (default 5s)")
	fs.Int64Var(&inflight, "max-inflight", 0, "shed (503) requests beyond this many in flight through the proxy; 0: no limit")
	fs.StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus metrics (the load shedder's) at /metrics on this address; default off")
	fs.StringVar(&shedRedis, "shed-redis-url", "", "Redis that the proxies of a fleet share for the shed section's fleet capacity (default: counted in this process alone)")
	fs.StringVar(&algo, "default-algorithm", "fixed_window", "algorithm of rules that name none: "+algorithmList())
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: sluice proxy --upstream URL (--rules DIR | --rls HOST:PORT) --domain NAME [--listen ADDR] [flags]")
		fmt.Fprintln(stderr, "\nA reverse proxy that applies the rules of DIR to every request and sends the")
		fmt.Fprintln(stderr, "RateLimit fields on every response. Every flag can also be set with SLUICE_<FLAG>.")
		fmt.Fprintln(stderr, "\nFlags:")
		fs.PrintDefaults()
	}
	if done, err := parseOptions(fs, args, getenv); done || err != nil {
		return err
	}

	var cfg gateway.Config
	if configFile != "" {
		data, err := os.ReadFile(configFile)
		if err != nil {
			return fmt.Errorf("proxy: %w", err)
		}
		if cfg, err = gateway.ParseFile(configFile, data); err != nil {
			return fmt.Errorf("proxy: %w", err)
		}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["upstream"] {
		cfg.Upstream = upstream
	}
	if set["rules"] {
		cfg.Rules = rulesDir
	}
	if set["rls"] {
		cfg.RLS = rlsAddr
	}
	for _, f := range []string{"rls-tls", "rls-tls-ca", "rls-tls-cert", "rls-tls-key", "rls-tls-server-name"} {
		if set[f] && cfg.RLS == "" {
			return fmt.Errorf("proxy: --%s: needs --rls (it says how to reach the rate limit service): %w", f, errUsage)
		}
	}
	if set["listen"] {
		cfg.Listen = listen
	}
	if set["domain"] {
		cfg.Domain = domain
	}
	if set["trusted-proxies"] {
		cfg.TrustedProxies = strings.Split(trusted, ",")
	}
	if set["descriptor"] {
		cfg.Descriptors = descriptors
	}
	if set["legacy-headers"] {
		cfg.LegacyHeaders = legacy
	}
	if set["fail-closed"] {
		cfg.FailClosed = failClosed
	}
	if set["failure-mode"] {
		switch failureMode {
		case "open", "closed":
			cfg.FailClosed = failureMode == "closed"
		default:
			return fmt.Errorf("proxy: --failure-mode: %q, want open or closed: %w", failureMode, errUsage)
		}
	}
	if set["max-delay"] {
		cfg.MaxDelay = maxDelay
	}
	if set["metrics-addr"] {
		cfg.MetricsAddr = metricsAddr
	}
	if inflight > 0 {
		cfg.Concurrency = append(cfg.Concurrency, gateway.Concurrency{Name: "inflight", Limit: inflight, Shed: true})
	}
	if cfg.Listen == "" {
		// Loopback unless told otherwise, like serve: a proxy that opens
		// itself to the network should be a decision, not a default.
		cfg.Listen = defaultProxyListen
	}
	cfg.Default()
	var errs []error
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	alg, err := sluice.ParseAlgorithm(algo)
	if err != nil {
		errs = append(errs, fmt.Errorf("--default-algorithm: %w", err))
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
		errs = append(errs, fmt.Errorf("--log-level: %q, want debug, info, warn or error", logLevel))
	}
	if len(errs) > 0 {
		return fmt.Errorf("proxy: %w: %w", errUsage, errors.Join(errs...))
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))

	// The store stack (store/compose): in process, for the concurrency
	// leases and, with --rules, the counters.
	store, err := compose.New(compose.DefaultConfig())
	if err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	defer store.Close()
	var checker httplimit.Checker
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	var rls *rlsState
	if cfg.RLS != "" {
		creds, err := rlsTLS.credentials()
		if err != nil {
			return fmt.Errorf("proxy: %w", err)
		}
		conn, err := grpc.NewClient(cfg.RLS, creds)
		if err != nil {
			return fmt.Errorf("proxy: --rls: %w", err)
		}
		defer conn.Close()
		checker = remote.New(conn, remote.Options{})
		// Say at start whether the service answers, and then on each change.
		rls = &rlsState{addr: cfg.RLS, failClosed: cfg.FailClosed, log: log.With("component", "rls")}
		rls.probe(ctx, conn, 2*time.Second)
		go rls.watch(wctx, conn)
	} else {
		watcher, err := watch.New(cfg.Rules, rules.Options{DefaultAlgorithm: alg}, log.With("component", "rules"))
		if err != nil {
			return fmt.Errorf("proxy: %w", err)
		}
		if !watcher.Current().HasDomain(cfg.Domain) {
			return fmt.Errorf("proxy: domain %q is in no rule file of %s (domains: %s)", cfg.Domain, cfg.Rules, strings.Join(watcher.Current().Domains(), ", "))
		}
		engine, err := service.New(service.DefaultConfig(), watcher, store, nil, log.With("component", "service"))
		if err != nil {
			return fmt.Errorf("proxy: %w", err)
		}
		checker = engine
		go func() { _ = watcher.Run(wctx) }()
	}
	glog := log.With("component", "gateway")
	sopts := shed.Options{OnError: func(err error) { glog.Warn("load shedder store failed", "err", err) }}
	if shedRedis != "" {
		ropts, err := redis.ParseURL(shedRedis)
		if err != nil {
			return fmt.Errorf("proxy: --shed-redis-url: %w", err)
		}
		rs, err := redis.New(ropts)
		if err != nil {
			return fmt.Errorf("proxy: --shed-redis-url: %w", err)
		}
		defer rs.Close()
		sopts.Store = rs
	}
	failed := &sampledWarn{log: glog, period: 10 * time.Second}
	handler, shedder, err := gateway.NewHandler(cfg, checker, store, sopts, func(r *http.Request, err error) {
		failed.warn("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	})
	if err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	var readyz http.Handler
	if rls != nil {
		readyz = rls
	}
	stopShed, err := startShed(wctx, cfg, shedder, glog, readyz)
	if err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	defer stopShed()
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(glog.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("proxy listening", "addr", ln.Addr().String(), "upstream", cfg.Upstream, "domain", cfg.Domain,
		"descriptors", strings.Join(cfg.Descriptors, "; "), "rls", cfg.RLS)
	select {
	case err := <-errc:
		return fmt.Errorf("proxy: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("proxy: shutdown: %w", err)
	}
	log.Info("proxy stopped")
	return nil
}
