package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/notify"
	"github.com/sluice-rl/sluice/observe"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/rules/watch"
	"github.com/sluice-rl/sluice/server/api"
	"github.com/sluice-rl/sluice/server/dashboard"
	"github.com/sluice-rl/sluice/server/rlqs"
	"github.com/sluice-rl/sluice/server/rls"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/service/promstats"
	"github.com/sluice-rl/sluice/store/compose"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/stack"
	"github.com/sluice-rl/sluice/tenant"
	"github.com/sluice-rl/sluice/tenant/pg"
)

func init() {
	register("serve", "run the rate-limit service (envoy RLS over gRPC, HTTP API)", runServe)
}

func runServe(ctx context.Context, args []string, getenv env, stdout, stderr io.Writer) error {
	cfg := defaultServeConfig()
	fs := newFlagSet("serve", stderr)
	cfg.flags(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: sluice serve [flags]")
		fmt.Fprintln(stderr, "\nEvery flag can also be set with SLUICE_<FLAG> (upper case, - as _); a flag wins.")
		fmt.Fprintln(stderr, "\nFlags:")
		fs.PrintDefaults()
	}
	if done, err := parseOptions(fs, args, getenv); done || err != nil {
		// A bad flag's value is quoted in the error: it may be the URL.
		return scrubber{cfg.secrets()}.err(err)
	}
	if err := cfg.loadSecrets(); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	scrub := scrubber{cfg.secrets()}
	if err := cfg.Validate(); err != nil {
		return scrub.err(fmt.Errorf("serve: %w", err))
	}
	log := cfg.logger(stderr)
	if passwordOnCommandLine(args, cfg) {
		log.Warn("the Redis URL on the command line holds a password, which every local user can read (ps, /proc); pass it in SLUICE_REDIS_URL or --redis-url-file instead")
	}
	if flagGiven(args, "postgres-url") && len(urlSecrets(cfg.Tenants.PostgresURL)) > 0 {
		log.Warn("the PostgreSQL URL on the command line holds a password, which every local user can read (ps, /proc); pass it in SLUICE_POSTGRES_URL instead")
	}
	s, err := newServer(cfg, log, deps{getenv: getenv})
	if err != nil {
		return scrub.err(err)
	}
	return scrub.err(s.run(ctx))
}

// passwordOnCommandLine reports whether --redis-url was given as an argument
// (not from the environment) with a secret in it.
func passwordOnCommandLine(args []string, cfg serveConfig) bool {
	return flagGiven(args, "redis-url") && cfg.Store.Redis.URLFile == "" && len(urlSecrets(cfg.Store.Redis.URL)) > 0
}

// flagGiven reports whether flag was given as an argument.
func flagGiven(args []string, flag string) bool {
	for _, a := range args {
		if a == "--" {
			break
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && name == flag {
			return true
		}
	}
	return false
}

// server is one running `sluice serve`: rules, store, engine and the three
// listeners. Build it with newServer (which binds the listeners, so
// addresses ending in :0 are known at once) and serve with run.
type server struct {
	cfg     serveConfig
	log     *slog.Logger
	watcher ruleSource // *watch.Watcher, or *xds.Client with --rules-xds
	store   sluice.Store
	closers []io.Closer
	engine  *service.Engine
	pg      *pg.Store          // nil without --postgres-url
	tenants *tenant.Registry   // nil without --postgres-url
	tracker *observe.Tracker   // nil without admin tokens
	sample  *service.Sample    // nil without admin tokens or --sample-size
	dash    *dashboard.Handler // nil without admin tokens
	// notifier tells the levels of rules' notify_at (notify.go).
	notifier *notify.Notifier
	fleet    dashboard.Fleet // the Redis store, for a fleet-wide dashboard
	rls      *rls.Server
	rlqs     *rlqs.Server
	grpc     *grpc.Server
	http     *http.Server
	debug    *http.Server

	grpcLn, httpLn, debugLn net.Listener
	draining                atomic.Bool

	// tenantFile: what became of the snapshot file at start (off, none,
	// unusable, restored); unloadedRefusals: checks refused (tenants.go).
	tenantFile       string
	unloadedRefusals atomic.Uint64
}

// deps are what newServer takes besides configuration; the zero value is
// production.
type deps struct {
	// now, if set, is the stores' clock (tests pass a fake one; the Redis
	// store then sends it to its scripts instead of reading Redis TIME).
	now func() time.Time
	// getenv reads the admin tokens given in the environment
	// (SLUICE_ADMIN_TOKEN, SLUICE_ADMIN_READONLY_TOKEN); nil reads none.
	getenv env
}

// newServer assembles the service from cfg (already validated) and binds its
// listeners. On error, everything it opened is closed again.
func newServer(cfg serveConfig, log *slog.Logger, d deps) (_ *server, err error) {
	s := &server{cfg: cfg, log: log}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	alg, err := sluice.ParseAlgorithm(cfg.Rules.DefaultAlgorithm)
	if err != nil {
		return nil, fmt.Errorf("serve: --default-algorithm: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := promstats.New(reg)
	s.watcher, err = newRuleSource(cfg.Rules, rules.Options{DefaultAlgorithm: alg, MergeDomains: cfg.Envoy.MergeDomains, PricesFile: cfg.Rules.Prices}, metrics.ObserveReload, log.With("component", "rules"))
	if err != nil {
		if _, statErr := os.Stat(cfg.Rules.Dir); errors.Is(statErr, fs.ErrNotExist) && cfg.Rules.Dir == defaultServeConfig().Rules.Dir {
			// The default names the repository's examples: say what to pass elsewhere.
			return nil, fmt.Errorf("serve: no rule directory %s here (the default works in a checkout of Sluice): pass --rules DIR or set SLUICE_RULES: %w", cfg.Rules.Dir, errUsage)
		}
		return nil, fmt.Errorf("serve: rules: %w", err)
	}

	ecfg := service.DefaultConfig()
	ecfg.ExpectedReplicas = cfg.Service.ExpectedReplicas
	ecfg.RequestBounds = cfg.Limits.requestBounds()
	cfg.Envoy.engine(&ecfg)
	memOpts := memory.Options{Now: d.now, MaxKeys: cfg.Store.Memory.MaxKeys}
	if skew := cfg.Store.Memory.ClockSkew; skew != 0 {
		now := d.now
		if now == nil {
			now = time.Now
		}
		memOpts.Now = func() time.Time { return now().Add(skew) }
	}
	memStores := map[string]*memory.Store{}
	if ecfg.DefaultFailureMode, err = rules.ParseFailureMode(cfg.Service.DefaultFailureMode); err != nil {
		return nil, fmt.Errorf("serve: --default-failure-mode: %w", err)
	}
	if cfg.Tenants.PostgresURL != "" {
		if err := s.openTenants(cfg.Tenants, reg, log); err != nil {
			return nil, err
		}
		ecfg.Overrides = s.tenants
	}
	redisTLS, err := cfg.Envoy.redisTLS()
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	st, err := newStack(cfg.Store, redisTLS, memOpts, d.now, log.With("component", "store"))
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	s.closers = append(s.closers, st)
	s.store = st
	if cfg.Store.Kind == compose.KindRedis {
		s.fleet = redisFleet{get: st.Redis}
		ecfg.Fallback = st.Fallback()
		memStores["fallback"] = st.Memory()
		registerStackStats(reg, st)
	} else {
		memStores["memory"] = st.Memory()
	}
	if hr, ok := s.store.(stack.HealthReporter); ok && cfg.Store.Kind == compose.KindRedis {
		reg.MustRegister(promstats.NewHealthCollector(hr))
	}
	reg.MustRegister(newMemoryCollector(cfg.Store.Memory.MaxKeys, memStores))
	getenv := d.getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	toks, err := adminTokens(cfg.Tenants.AdminTokenFile, getenv)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	if toks.Len() > 0 { // the admin API is on: keep the top offenders it serves
		s.tracker = observe.NewTracker(observe.Options{})
		ecfg.Observer = s.tracker
		if err := s.guardTokens(toks, reg, log.With("component", "auth")); err != nil {
			return nil, err
		}
	}
	n, err := s.newNotifier(reg, log.With("component", "notify"))
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, n)
	s.notifier, ecfg.Notify = n, n
	if toks.Len() > 0 && cfg.Service.SampleSize > 0 { // for sluice diff
		s.sample = service.NewSample(cfg.Service.SampleSize, cfg.Service.SampleEvery)
		ecfg.Sample = s.sample
	}
	s.engine, err = service.New(ecfg, s.watcher, s.store, metrics, log.With("component", "engine"))
	if err != nil {
		return nil, fmt.Errorf("serve: engine: %w", err)
	}
	if w, ok := s.watcher.(*watch.Watcher); ok { // over xDS, the management server decides removals
		w.Guard = ruleGuard(cfg.Rules.Guard, s.engine)
		w.OnHold = func(h *rules.Hold) {
			var reasons []string
			if h != nil {
				reasons = h.Reasons
			}
			metrics.ObserveHold(reasons)
		}
	}

	reg.MustRegister(newDetailedCollector(s.engine), storeUpGauge(s.engine))

	tlsCfg, err := serverTLS(cfg.Listen.TLS)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	ropts := rls.Options{Logger: log.With("component", "grpc"), ResponseHeaders: cfg.Listen.ResponseHeaders, RequestBounds: ecfg.RequestBounds}
	cfg.Envoy.rlsOptions(&ropts)
	s.rls = rls.New(s.engine, ropts)
	if tlsCfg != nil && cfg.Envoy.ClientTLSSAN != "" {
		requireSAN(tlsCfg, cfg.Envoy.ClientTLSSAN)
	}
	// Metadata is bounded like bodies: without MaxHeaderListSize a call's
	// headers may be as large as the client likes (15 MiB were accepted).
	gopts := append([]grpc.ServerOption{grpc.MaxRecvMsgSize(cfg.Limits.RequestBytes), grpc.MaxHeaderListSize(uint32(cfg.Limits.RequestBytes))},
		cfg.Envoy.grpcOptions()...)
	gopts = append(gopts, rls.ServerOptions()...)
	gopts = append(gopts, s.refuseUnloadedGRPC()...)
	if cfg.Envoy.Tracing.On {
		tp, err := cfg.Envoy.Tracing.provider(context.Background())
		if err != nil {
			return nil, fmt.Errorf("serve: %w", err)
		}
		s.closers = append(s.closers, closerFunc(func() error {
			// Flush what is buffered, but never hang on a collector that is down.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			return tp.Shutdown(ctx)
		}))
		gopts = append(gopts, tracingOptions(tp)...)
	}
	if tlsCfg != nil {
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	s.grpc = grpc.NewServer(gopts...)
	s.rls.Register(s.grpc)
	// gRPC health says what /readyz says of tenant data: NOT_SERVING while
	// checks are refused for want of it (OnSource turns it SERVING).
	s.rls.SetServing(!s.tenantsRefusing())
	if err := s.registerRLQS(reg, ecfg.RequestBounds); err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}

	publicMetrics, debugMetrics := s.metricsHandlers(reg, toks)
	aopts := api.Options{
		Checker:         s.engine,
		Ready:           s.ready,
		Metrics:         publicMetrics,
		Rules:           s.watcher,
		Logger:          log.With("component", "http"),
		ResponseHeaders: cfg.Listen.ResponseHeaders,
		DecisionInstant: cfg.Listen.DecisionInstant,
		MaxBodyBytes:    int64(cfg.Limits.RequestBytes),
		RequestBounds:   ecfg.RequestBounds,
		ReadyNotes:      s.allReadyNotes,
		StoreHealth:     s.engine.Ready,
		RuleSwitch:      s.ruleSwitch,
	}
	if toks.Len() > 0 {
		// A charge can refund quota: it needs a read-write or a
		// charge-only admin token, and is off without tokens.
		aopts.Charger, aopts.ChargeAuth = s.engine, toks.Charge()
		aopts.ReadAuth = toks.Read() // /debug/rules names every limit and file path
	}
	h, err := api.New(aopts)
	if err != nil {
		return nil, fmt.Errorf("serve: http: %w", err)
	}
	h = s.refuseUnloaded(h)
	if h, err = s.withAdmin(h, toks, log.With("component", "admin")); err != nil {
		return nil, err
	}
	if h, err = s.withDashboard(h, toks, reg, log.With("component", "dashboard")); err != nil {
		return nil, err
	}
	s.http = &http.Server{
		Handler:           h,
		MaxHeaderBytes:    maxHeaderBytes,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		TLSConfig:         tlsCfg,
	}
	if debugOn(cfg.Listen.Debug) {
		dopts := aopts
		dopts.Metrics = debugMetrics
		dh, err := api.NewDebug(dopts)
		if err != nil {
			return nil, fmt.Errorf("serve: debug: %w", err)
		}
		// No write timeout: a CPU profile or trace streams for as long as asked.
		s.debug = &http.Server{Handler: dh, MaxHeaderBytes: maxHeaderBytes, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	}

	if cfg.Envoy.GRPCUDS != "" {
		if s.grpcLn, err = listenUDS(cfg.Envoy.GRPCUDS); err != nil {
			return nil, fmt.Errorf("serve: --grpc-uds: %w", err)
		}
	} else if s.grpcLn, err = net.Listen("tcp", cfg.Listen.GRPC); err != nil {
		return nil, fmt.Errorf("serve: --grpc-addr: %w", err)
	}
	if s.httpLn, err = net.Listen("tcp", cfg.Listen.HTTP); err != nil {
		return nil, fmt.Errorf("serve: --http-addr: %w", err)
	}
	if s.debug != nil {
		if s.debugLn, err = net.Listen("tcp", cfg.Listen.Debug); err != nil {
			return nil, fmt.Errorf("serve: --debug-addr: %w", err)
		}
	}
	return s, nil
}

// debugOn reports whether the debug listener is wanted: "" and "off" turn
// it off (SLUICE_DEBUG_ADDR=off, since an empty variable means unset).
func debugOn(addr string) bool { return addr != "" && addr != "off" }

// ready is /readyz: not while draining, nor before rules are loaded, nor
// (--tenants-unloaded refuse) before tenant data is; with
// --readyz-strict, not while the store does not answer either. By default a
// down store leaves the instance ready: it still decides, by each limit's
// failure_mode, and a store outage would otherwise take every instance of
// the fleet out of its Service at once (docs/operations.md).
func (s *server) ready(ctx context.Context) error {
	if s.draining.Load() {
		return errors.New("shutting down")
	}
	if s.cfg.Rules.Guard.FailReady && s.watcher.LastError() != nil {
		return errors.New("the last rule reload failed (see /debug/rules); serving the last good rules")
	}
	if err := s.tenantsUnready(); err != nil {
		return err
	}
	if s.cfg.Guard.ReadyzStrict {
		return s.engine.Ready(ctx)
	}
	if s.watcher.Current() == nil {
		return errors.New("no rules loaded")
	}
	return nil
}

// ruleGuard is the removal guard of rule reloads: a rule is in use when
// the engine matched it within cfg.InUse.
func ruleGuard(cfg ruleGuardConfig, e *service.Engine) *watch.Guard {
	g := &watch.Guard{AllowRemoval: cfg.AllowRemoval, Settle: cfg.Settle}
	if cfg.InUse > 0 {
		g.InUse = func(r rules.RuleRef) bool {
			t := e.LastHit(r.Domain, r.ID)
			return !t.IsZero() && time.Since(t) < cfg.InUse
		}
	}
	return g
}

// grpcAddr, httpAddr and debugAddr are the bound addresses.
func (s *server) grpcAddr() string { return s.grpcLn.Addr().String() }
func (s *server) httpAddr() string { return s.httpLn.Addr().String() }

// run serves until ctx is done, then shuts down gracefully: readiness and
// gRPC health turn NOT_SERVING, listeners stop accepting, in-flight calls
// drain (up to ShutdownTimeout), and the store is closed. It returns nil
// after a clean shutdown, or the first serving error.
func (s *server) run(ctx context.Context) error {
	defer s.close()
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	errc := make(chan error, 4)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := s.watcher.Run(watchCtx); err != nil {
			s.log.Error("rule watcher stopped; rules will not reload", "err", err)
		}
	}()
	if s.tenants != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = s.tenants.Run(watchCtx)
		}()
	}
	if s.dash != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.dash.Run(watchCtx)
		}()
	}
	go func() {
		if err := s.grpc.Serve(s.grpcLn); err != nil {
			errc <- fmt.Errorf("serve: grpc: %w", err)
		}
	}()
	go func() {
		serve := s.http.Serve
		if s.cfg.Listen.TLS.Cert != "" {
			serve = func(ln net.Listener) error { return s.http.ServeTLS(ln, "", "") }
		}
		if err := serve(s.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("serve: http: %w", err)
		}
	}()
	if s.debug != nil {
		go func() {
			if err := s.debug.Serve(s.debugLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("serve: debug: %w", err)
			}
		}()
	}
	attrs := []any{"grpc", s.grpcAddr(), "http", s.httpAddr(), "tls", s.cfg.Listen.TLS.Cert != "", "store", s.cfg.Store.Kind, "rules", s.cfg.Rules.Dir}
	if s.cfg.Rules.XDS != "" {
		attrs[len(attrs)-1] = "xds://" + s.cfg.Rules.XDS
	}
	if s.debugLn != nil {
		attrs = append(attrs, "debug", s.debugLn.Addr().String())
	}
	s.log.Info("sluice serving", attrs...)

	var serveErr error
	select {
	case <-ctx.Done():
		s.log.Info("shutting down: draining in-flight calls", "timeout", s.cfg.ShutdownTimeout)
	case serveErr = <-errc:
		s.log.Error("server failed; shutting down", "err", serveErr)
	}
	s.shutdown()
	stopWatch()
	wg.Wait()
	if serveErr == nil {
		s.log.Info("shut down cleanly")
	}
	return serveErr
}

// shutdown drains within the timeout: readiness and gRPC health turn
// NOT_SERVING, gRPC stops accepting and drains its calls while the HTTP
// listeners still answer (so /readyz says 503 "shutting down" instead of
// refusing connections), then the HTTP listeners stop and drain.
func (s *server) shutdown() {
	s.draining.Store(true)
	s.rls.Shutdown()
	s.rlqs.Shutdown() // RLQS streams never end by themselves: end them so the drain can finish
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	done := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.log.Warn("gRPC drain timed out; closing remaining calls")
		s.grpc.Stop()
		<-done
	}
	var wg sync.WaitGroup
	for _, hs := range []*http.Server{s.http, s.debug} {
		if hs == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := hs.Shutdown(ctx); err != nil {
				s.log.Warn("HTTP drain timed out; closing remaining connections", "err", err)
				_ = hs.Close()
			}
		}()
	}
	wg.Wait()
}

// close releases what newServer opened; it is safe on a partial server.
func (s *server) close() {
	for _, ln := range []net.Listener{s.grpcLn, s.httpLn, s.debugLn} {
		if ln != nil {
			_ = ln.Close()
		}
	}
	for i := len(s.closers) - 1; i >= 0; i-- {
		_ = s.closers[i].Close()
	}
	s.closers = nil
}
