package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/server/rlqs"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/stack"
	"github.com/sluice-rl/sluice/tenant"
)

// serveConfig is everything `sluice serve` can be told. Start from
// defaultServeConfig; bind sets it from flags and SLUICE_* variables;
// Validate reports every bad field.
type serveConfig struct {
	Rules   rulesConfig
	Listen  listenConfig
	Store   storeConfig
	Service engineConfig
	Limits  limitsConfig
	Tenants tenantsConfig
	Log     logConfig
	Guard   guardConfig // guard.go
	Envoy   envoyConfig
	Notify  notifyConfig // notify.go
	// ShutdownTimeout bounds the drain of in-flight calls on SIGINT/SIGTERM;
	// what is still running after it is cut off.
	ShutdownTimeout time.Duration
}

type rulesConfig struct {
	// Dir is the directory of rule files, watched for changes.
	Dir string
	// XDS, if set, is the xDS management server (host:port) the rules come
	// from instead of Dir; XDSNode is the node ID sent to it.
	XDS, XDSNode string
	// DefaultAlgorithm applies to rate_limits that name none.
	DefaultAlgorithm string
	// Prices, if set, is the price table file of money budgets
	// (rules.Options.PricesFile): watched and reloaded with the rules
	// (with XDS, read again with each rules update).
	Prices string
	// Guard holds back reloads that remove domains or rules in use.
	Guard ruleGuardConfig
}

// ruleGuardConfig is the removal guard of rule reloads (watch.Guard) and
// what readiness says about reloads.
type ruleGuardConfig struct {
	// AllowRemoval applies every valid reload, removals included.
	AllowRemoval bool
	// InUse is how recent a rule's last match must be for its removal to
	// be held; 0: only removed domains are held.
	InUse time.Duration
	// Settle applies a held removal once it has stayed unchanged this
	// long; 0: only a confirmation applies it.
	Settle time.Duration
	// FailReady makes /readyz fail while the last reload failed.
	FailReady bool
}

type listenConfig struct {
	// GRPC serves envoy's rate limit service, health and reflection.
	GRPC string
	// HTTP serves /v1/check, /json, health, /metrics and /debug/rules.
	HTTP string
	// Debug serves pprof (and /metrics, /debug/rules); "" or "off" turns it
	// off.
	Debug string
	// ResponseHeaders adds RateLimit, RateLimit-Policy and Retry-After to
	// responses (envoy response_headers_to_add; HTTP headers).
	ResponseHeaders bool
	// DecisionInstant adds Sluice-Decided-At, the store's decision
	// instant, to /v1/check answers (api.Options.DecisionInstant): for
	// the proof harness.
	DecisionInstant bool
	// RLQSUnmatched is the assignment of an Envoy RLQS bucket that matches
	// no rule: "allow" or "deny" (docs/rlqs.md).
	RLQSUnmatched string
	// RLQSMaxStreamAge ends an RLQS stream this old (the Envoy reconnects
	// and keeps its grants); 0: never (rlqs.Options.MaxStreamAge).
	RLQSMaxStreamAge time.Duration
	// RLQSReconnectGrace keeps an ended RLQS stream's grants this long for
	// its Envoy (rlqs.Options.ReconnectGrace; 0: two reporting intervals).
	RLQSReconnectGrace time.Duration
	// TLS, when Cert is set, serves gRPC and HTTP over TLS (not the debug
	// listener, which is meant for loopback).
	TLS tlsConfig
}

type tlsConfig struct {
	// Cert and Key are PEM files: the certificate chain and its private key.
	// Both or neither; they are read again when they change on disk.
	Cert, Key string
	// ClientCA, if set, is a PEM file of CAs; clients must present a
	// certificate signed by one of them (mutual TLS).
	ClientCA string
}

type storeConfig struct {
	// Kind is "memory" or "redis".
	Kind   string
	Memory memoryConfig
	Redis  redisConfig
}

type memoryConfig struct {
	// MaxKeys caps the keys of the memory store (and of the local-fallback
	// store when Kind is redis).
	MaxKeys int
	// ClockSkew shifts the clock the in-process stores read (the memory
	// store; the local fallback of failure_mode local) by this much: a
	// fault to test with (internal/proof runs an instance 2.5 s ahead).
	// Redis decisions keep Redis's TIME. 0: the host's clock.
	ClockSkew time.Duration
}

type redisConfig struct {
	// URL: redis://[user:pass@]host:port/db, rediss://…, a Sentinel URL
	// (redis-sentinel://host:port,host:port/master) or a cluster URL
	// (redis-cluster://host:port,host:port); see store/redis.ParseURL.
	URL string
	// URLFile, if set, is a file holding URL (for a URL with a password:
	// the command line is visible to every local user). It wins over URL.
	URLFile string
	// Prefix is put before every key Sluice writes; "" means the URL's
	// prefix parameter, else the store's default.
	Prefix string
	// Timeout bounds one store call; 0 means the URL's timeout parameter,
	// else the store's default (1s, redis.DefaultTimeout).
	Timeout time.Duration
	// DeniedCache is "auto" (on unless Redis is a Cluster), "on" or "off".
	DeniedCache string
	// HybridHorizon sizes allotments of placement: hybrid rules (0: the
	// store's default, 10s).
	HybridHorizon time.Duration
	// AllowEviction accepts a Redis whose maxmemory-policy can evict
	// Sluice's keys (redis.Options.AllowEviction); without it such a Redis
	// is refused at start.
	AllowEviction bool
	// NativeFixedWindow decides fixed_window rules with native Redis
	// counters instead of the script (redis.Options.NativeFixedWindow).
	NativeFixedWindow bool
	// NativeSlidingWindow decides sliding_window rules with native Redis
	// counters instead of the script (redis.Options.NativeSlidingWindow).
	NativeSlidingWindow bool
	// MemoryWatch is how often the Redis nodes' maxmemory-policy and
	// evicted_keys are read (compose.Config.MemoryWatch; 0: its default,
	// 10s). No flag: tests shorten it.
	MemoryWatch time.Duration
}

type engineConfig struct {
	// ExpectedReplicas divides limits for failure_mode local.
	ExpectedReplicas int
	// DefaultFailureMode applies to rules that name none.
	DefaultFailureMode string
	// SampleSize is how many recent checks the server keeps for previews
	// of rule changes (GET /admin/v1/sample, sluice diff); 0: none.
	SampleSize int
	// SampleEvery records one check in this many.
	SampleEvery int
}

// defaultMaxRequestBytes bounds an HTTP body and a gRPC message: far above
// any real check (an Envoy request is well under 10 KiB), yet a message
// packed with tiny descriptors costs about 9 ms of CPU to decode and refuse
// (BENCHMARKS.md), a quarter of what 1 MiB would.
const defaultMaxRequestBytes = 256 << 10

// maxHeaderBytes bounds an HTTP request's line and header fields together
// (http.Server.MaxHeaderBytes; net/http's default is 1 MiB): Envoy's
// default max_request_headers_kb is 60. A 1 MiB request line cost 8 MB to
// read and refuse (server/admin TestWorstQueryMemory).
const maxHeaderBytes = 64 << 10

// limitsConfig bounds requests; see service.RequestBounds.
type limitsConfig struct {
	KeyBytes, ValueBytes, Descriptors, Entries int
	// RequestBytes bounds an HTTP body and a gRPC message.
	RequestBytes int
	// DetailedMetricValues bounds the label values of detailed_metric rules.
	DetailedMetricValues int
}

// requestBounds returns the bounds in the engine's terms (service.RequestBounds).
func (l limitsConfig) requestBounds() service.RequestBounds {
	return service.RequestBounds{MaxKeyBytes: l.KeyBytes, MaxValueBytes: l.ValueBytes, MaxDescriptors: l.Descriptors,
		MaxEntries: l.Entries, MaxDetailedMetricValues: l.DetailedMetricValues}
}

// tenantsConfig turns on quotas per tenant (PostgreSQL) and the admin API.
type tenantsConfig struct {
	// PostgresURL holds tenant records; "" turns tenants off. Prefer the
	// SLUICE_POSTGRES_URL variable: a flag's value shows in ps.
	PostgresURL string
	// Migrate applies the schema migrations at start.
	Migrate bool
	// Resync is the period of the full reload that backs up LISTEN/NOTIFY.
	Resync time.Duration
	// AdminTokenFile lists the admin API's bearer tokens; with no tokens
	// (file or SLUICE_ADMIN_TOKEN / SLUICE_ADMIN_READONLY_TOKEN) the admin
	// API is off, and so is POST /v1/charge (it needs a read-write or charge token).
	AdminTokenFile string
	// Snapshot is the file that keeps the last tenant snapshot loaded, read
	// at start (see docs/tenants.md): "" means the default,
	// <user cache dir>/sluice/tenants-<database id>.snapshot; "off" keeps none.
	Snapshot string
	// Unloaded is what an instance does until it has loaded tenant data
	// from anywhere (PostgreSQL, Snapshot, the Redis copy): "refuse" (not
	// ready, checks refused) or "defaults" (ready, the rule files' limits
	// for every tenant). tenants.go.
	Unloaded string
	// CopyMaxBytes bounds the copy of the tenant snapshot kept in Redis
	// with --store redis; 0 keeps none. tenants.go.
	CopyMaxBytes int64
	// FileEvery and CopyEvery are the least times between two writes of
	// the snapshot file and of the Redis copy (tenant.Options); 0 is the
	// tenant package's default, 10s. No flag sets them: tests shorten
	// them so as not to wait out the default.
	FileEvery, CopyEvery time.Duration
}

type logConfig struct {
	// Format is "text" or "json".
	Format string
	// Level is debug, info, warn or error.
	Level string
}

// defaultServeConfig runs on a fresh clone: memory store, the example rules,
// loopback listeners.
func defaultServeConfig() serveConfig {
	return serveConfig{
		Rules: rulesConfig{Dir: "examples/rules", DefaultAlgorithm: sluice.FixedWindow.String(),
			Guard: ruleGuardConfig{InUse: 15 * time.Minute}},
		Listen: listenConfig{GRPC: "127.0.0.1:8081", HTTP: "127.0.0.1:8080", Debug: "127.0.0.1:6070", RLQSUnmatched: "allow"},
		Store: storeConfig{Kind: "memory", Memory: memoryConfig{MaxKeys: memory.DefaultMaxKeys}, Redis: redisConfig{
			URL: "redis://127.0.0.1:6379/0", DeniedCache: "auto",
		}},
		Service: engineConfig{ExpectedReplicas: 1, DefaultFailureMode: "open", SampleSize: 1000, SampleEvery: 10},
		Limits: limitsConfig{
			KeyBytes: service.DefaultMaxKeyBytes, ValueBytes: service.DefaultMaxValueBytes,
			Descriptors: service.DefaultMaxDescriptors, Entries: service.DefaultMaxEntries,
			RequestBytes: defaultMaxRequestBytes, DetailedMetricValues: service.DefaultMaxDetailedMetricValues,
		},
		Tenants:         tenantsConfig{Resync: time.Minute, Unloaded: unloadedRefuse, CopyMaxBytes: tenant.DefaultMaxCopyBytes},
		Envoy:           defaultEnvoyConfig(),
		Log:             logConfig{Format: "text", Level: "info"},
		Guard:           defaultGuardConfig(),
		ShutdownTimeout: 10 * time.Second,
	}
}

// flags binds every field to a flag of fs. Each flag also reads the
// variable SLUICE_<NAME> (upper case, - as _) when not given on the command
// line.
func (c *serveConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Rules.Dir, "rules", c.Rules.Dir, "directory of rule files (watched for changes)")
	fs.StringVar(&c.Rules.XDS, "rules-xds", c.Rules.XDS, "xDS management server (host:port) to take the rules from (RateLimitConfig resources over ADS) instead of --rules")
	fs.StringVar(&c.Rules.XDSNode, "rules-xds-node", c.Rules.XDSNode, "xDS node ID sent to --rules-xds")
	fs.StringVar(&c.Rules.Prices, "prices", c.Rules.Prices, "price table file (YAML) of money budgets (rate_limit.usage and budget), watched and reloaded with the rules")
	fs.StringVar(&c.Rules.DefaultAlgorithm, "default-algorithm", c.Rules.DefaultAlgorithm, "algorithm of rules that name none: "+algorithmList())
	fs.BoolVar(&c.Rules.Guard.AllowRemoval, "rules-allow-removal", c.Rules.Guard.AllowRemoval, "apply rule reloads that remove a domain or a rule in use (off: such a reload is held until confirmed in "+rules.AllowRemovalFile+")")
	fs.DurationVar(&c.Rules.Guard.InUse, "rules-in-use-window", c.Rules.Guard.InUse, "a rule matched within this window is in use: a reload removing it is held (0: only removed domains are held)")
	fs.DurationVar(&c.Rules.Guard.Settle, "rules-removal-settle", c.Rules.Guard.Settle, "apply a held removal once it has stayed unchanged this long (0: only a confirmation applies it)")
	fs.BoolVar(&c.Rules.Guard.FailReady, "readyz-fail-on-reload-error", c.Rules.Guard.FailReady, "/readyz fails while the last rule reload failed")
	fs.StringVar(&c.Listen.GRPC, "grpc-addr", c.Listen.GRPC, "gRPC listen address (envoy RLS v3, health, reflection)")
	fs.StringVar(&c.Listen.HTTP, "http-addr", c.Listen.HTTP, "HTTP listen address (/v1/check, /json, /healthz, /readyz, /metrics, /debug/rules)")
	fs.StringVar(&c.Listen.Debug, "debug-addr", c.Listen.Debug, `debug listen address (pprof); "" or off turns it off`)
	fs.BoolVar(&c.Listen.ResponseHeaders, "response-headers", c.Listen.ResponseHeaders, "add RateLimit, RateLimit-Policy and Retry-After headers to answers")
	fs.BoolVar(&c.Listen.DecisionInstant, "debug-decision-instant", c.Listen.DecisionInstant, "testing: add Sluice-Decided-At (the store's decision instant, µs since the epoch) to /v1/check answers")
	fs.StringVar(&c.Listen.RLQSUnmatched, "rlqs-unmatched", c.Listen.RLQSUnmatched, "Envoy rate limit quota (RLQS) buckets matching no rule: allow or deny")
	fs.DurationVar(&c.Listen.RLQSMaxStreamAge, "rlqs-max-stream-age", c.Listen.RLQSMaxStreamAge, "end an RLQS stream this old, less up to a tenth (the Envoy reconnects and keeps its grants; 0: never)")
	fs.DurationVar(&c.Listen.RLQSReconnectGrace, "rlqs-reconnect-grace", c.Listen.RLQSReconnectGrace, "keep an ended RLQS stream's buckets and grants this long for its Envoy to reconnect (0: 10s, two reporting intervals; negative: off)")
	fs.StringVar(&c.Listen.TLS.Cert, "tls-cert", c.Listen.TLS.Cert, "PEM certificate chain: serve gRPC and HTTP over TLS (with --tls-key)")
	fs.StringVar(&c.Listen.TLS.Key, "tls-key", c.Listen.TLS.Key, "PEM private key of --tls-cert")
	fs.StringVar(&c.Listen.TLS.ClientCA, "tls-client-ca", c.Listen.TLS.ClientCA, "PEM CA certificates: require client certificates signed by them (mutual TLS)")
	fs.StringVar(&c.Store.Kind, "store", c.Store.Kind, "where counters live: memory or redis")
	fs.IntVar(&c.Store.Memory.MaxKeys, "memory-max-keys", c.Store.Memory.MaxKeys, "most keys the memory store holds (docs/service.md gives the memory this takes)")
	fs.DurationVar(&c.Store.Memory.ClockSkew, "clock-skew", c.Store.Memory.ClockSkew, "fault testing: shift the clock of the in-process stores (memory store, failure_mode local) by this much; Redis decisions keep Redis's TIME")
	fs.StringVar(&c.Store.Redis.URL, "redis-url", c.Store.Redis.URL, "Redis URL: redis://host:port/db, redis-sentinel://h:p,h:p/master, redis-cluster://h:p,h:p (with a password, prefer SLUICE_REDIS_URL or --redis-url-file)")
	fs.StringVar(&c.Store.Redis.URLFile, "redis-url-file", c.Store.Redis.URLFile, "file holding the Redis URL (wins over --redis-url; keeps a password off the command line)")
	fs.StringVar(&c.Store.Redis.Prefix, "redis-prefix", c.Store.Redis.Prefix, "prefix of every Redis key (default: the store's, sluice:)")
	fs.DurationVar(&c.Store.Redis.Timeout, "redis-timeout", c.Store.Redis.Timeout, "timeout of one Redis script call, from when it is written to Redis (0: the store's default, 1s)")
	fs.StringVar(&c.Store.Redis.DeniedCache, "denied-cache", c.Store.Redis.DeniedCache, "answer keys denied lately from memory until their RetryAfter: auto (on unless Redis Cluster), on, off")
	fs.BoolVar(&c.Store.Redis.NativeFixedWindow, "redis-native-fixed-window", c.Store.Redis.NativeFixedWindow, "decide fixed_window rules with native Redis counters (INCRBY on a per-window key, no script; about a third of the script's Redis CPU); a call that times out is taken back when its late reply comes, as on the script path (docs/stores.md)")
	fs.BoolVar(&c.Store.Redis.NativeSlidingWindow, "redis-native-sliding-window", c.Store.Redis.NativeSlidingWindow, "decide sliding_window rules with native Redis counters (INCRBY on the window's key, GET of the previous window's, no script), as --redis-native-fixed-window does fixed windows (docs/stores.md)")
	fs.BoolVar(&c.Store.Redis.AllowEviction, "redis-allow-eviction", c.Store.Redis.AllowEviction, "accept a Redis whose maxmemory-policy can evict Sluice's keys (any but noeviction): an evicted counter makes its limit admit more than its quota (off: such a Redis is refused at start; docs/operations.md)")
	fs.DurationVar(&c.Store.Redis.HybridHorizon, "hybrid-horizon", c.Store.Redis.HybridHorizon, "placement hybrid: allotments last this long at a key's observed rate (0: 10s)")
	fs.IntVar(&c.Service.SampleSize, "sample-size", c.Service.SampleSize, "recent checks kept for sluice diff (GET /admin/v1/sample, needs admin tokens); 0: none")
	fs.IntVar(&c.Service.SampleEvery, "sample-every", c.Service.SampleEvery, "record one check in this many in the sample")
	fs.IntVar(&c.Service.ExpectedReplicas, "expected-replicas", c.Service.ExpectedReplicas, "replicas sharing the store; failure_mode local enforces limit ÷ this")
	fs.StringVar(&c.Service.DefaultFailureMode, "default-failure-mode", c.Service.DefaultFailureMode, "failure mode of rules that name none: open, closed or local")
	fs.IntVar(&c.Limits.KeyBytes, "max-key-bytes", c.Limits.KeyBytes, "longest descriptor key (and domain) accepted, in bytes")
	fs.IntVar(&c.Limits.ValueBytes, "max-value-bytes", c.Limits.ValueBytes, "longest descriptor value accepted, in bytes")
	fs.IntVar(&c.Limits.Descriptors, "max-descriptors", c.Limits.Descriptors, "most descriptors in one request")
	fs.IntVar(&c.Limits.Entries, "max-entries", c.Limits.Entries, "most entries in one descriptor")
	fs.IntVar(&c.Limits.RequestBytes, "max-request-bytes", c.Limits.RequestBytes, "largest HTTP body or gRPC message accepted, in bytes")
	fs.IntVar(&c.Limits.DetailedMetricValues, "max-detailed-metric-values", c.Limits.DetailedMetricValues, "most label values detailed_metric rules create; more are counted under the rule's own label")
	fs.StringVar(&c.Tenants.PostgresURL, "postgres-url", c.Tenants.PostgresURL, "PostgreSQL URL of tenant quotas (prefer SLUICE_POSTGRES_URL); empty: tenants off")
	fs.BoolVar(&c.Tenants.Migrate, "migrate", c.Tenants.Migrate, "apply the PostgreSQL schema migrations at start (as sluice migrate does)")
	fs.DurationVar(&c.Tenants.Resync, "tenants-resync", c.Tenants.Resync, "period of the full reload of tenant records (backs up LISTEN/NOTIFY)")
	fs.StringVar(&c.Tenants.Snapshot, "tenant-snapshot", c.Tenants.Snapshot, "file keeping the last tenant snapshot, used when PostgreSQL is unreachable at start (default: <user cache dir>/sluice/tenants-<database id>.snapshot; off: none)")
	c.Tenants.flags(fs)
	fs.StringVar(&c.Tenants.AdminTokenFile, "admin-token-file", c.Tenants.AdminTokenFile, "file of admin API bearer tokens, lines of: <name> <rw|ro|charge> <token> (charge: only POST /v1/charge); none: admin API and POST /v1/charge off")
	fs.StringVar(&c.Log.Format, "log-format", c.Log.Format, "log format: text or json")
	fs.StringVar(&c.Log.Level, "log-level", c.Log.Level, "log level: debug, info, warn or error")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "how long to drain in-flight calls on SIGINT/SIGTERM")
	c.Guard.flags(fs)
	c.Envoy.flags(fs)
	c.Notify.flags(fs)
}

func algorithmList() string {
	var names []string
	for _, a := range stack.Algorithms() {
		names = append(names, a.String())
	}
	return strings.Join(names, ", ")
}

// envName is the environment variable that sets a flag.
func envName(flagName string) string {
	return "SLUICE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseFlags parses args into fs, then applies SLUICE_* variables to every
// flag the command line did not set: a flag wins over the environment.
// parseOptions is parseFlags for commands that take flags only: done is true
// when the caller asked for help (already printed), and any positional
// argument is a usage error.
func parseOptions(fs *flag.FlagSet, args []string, getenv env) (done bool, err error) {
	if err := parseFlags(fs, args, getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, nil
		}
		return false, err
	}
	if fs.NArg() > 0 {
		return false, fmt.Errorf("%s: unexpected arguments %q: %w", fs.Name(), fs.Args(), errUsage)
	}
	return false, nil
}

func parseFlags(fs *flag.FlagSet, args []string, getenv env) error {
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] {
			return
		}
		name := envName(f.Name)
		if v := getenv(name); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", name, v, err))
			}
		}
	})
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", errUsage, errors.Join(errs...))
	}
	return nil
}

// Validate reports every invalid field, one error each.
func (c serveConfig) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Rules.XDS != "" {
		if c.Rules.XDSNode == "" {
			bad("--rules-xds-node: empty; give the node ID the management server knows this instance by")
		}
	} else if c.Rules.Dir == "" {
		bad("--rules: empty; give a directory of rule files")
	} else if fi, err := os.Stat(c.Rules.Dir); err != nil {
		bad("--rules: %v", err)
	} else if !fi.IsDir() {
		bad("--rules: %s is not a directory", c.Rules.Dir)
	}
	if _, err := sluice.ParseAlgorithm(c.Rules.DefaultAlgorithm); err != nil {
		bad("--default-algorithm: %v", err)
	}
	if _, err := rlqs.ParseUnmatched(c.Listen.RLQSUnmatched); err != nil {
		bad("--rlqs-unmatched: %v", err)
	}
	if c.Rules.Guard.InUse < 0 {
		bad("--rules-in-use-window: %v is negative", c.Rules.Guard.InUse)
	}
	if c.Rules.Guard.Settle < 0 {
		bad("--rules-removal-settle: %v is negative", c.Rules.Guard.Settle)
	}
	for _, a := range []struct{ flag, addr string }{{"--grpc-addr", c.Listen.GRPC}, {"--http-addr", c.Listen.HTTP}, {"--debug-addr", c.Listen.Debug}} {
		if a.flag == "--debug-addr" && !debugOn(a.addr) {
			continue
		}
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			bad("%s: %q is not host:port: %v", a.flag, a.addr, err)
		}
	}
	switch c.Store.Kind {
	case "memory":
	case "redis":
		if c.Store.Redis.URL == "" {
			bad("--redis-url: empty, but --store is redis")
		} else if _, err := redisOptions(c.Store.Redis, nil); err != nil {
			bad("%v", err)
		}
		if strings.ContainsAny(c.Store.Redis.Prefix, "{}") {
			bad("--redis-prefix: %q must not contain '{' or '}' (they would change the hash slot)", c.Store.Redis.Prefix)
		}
		if c.Store.Redis.Timeout < 0 {
			bad("--redis-timeout: %v, want a positive duration (or 0 for the default)", c.Store.Redis.Timeout)
		}
		if d := c.Store.Redis.DeniedCache; d != "auto" && d != "on" && d != "off" {
			bad("--denied-cache: %q, want auto, on or off", d)
		}
		if c.Store.Redis.HybridHorizon < 0 {
			bad("--hybrid-horizon: %v, want a positive duration (or 0 for the default)", c.Store.Redis.HybridHorizon)
		}
	default:
		bad("--store: %q, want memory or redis", c.Store.Kind)
	}
	if c.Store.Memory.MaxKeys < 1 {
		bad("--memory-max-keys: %d, want at least 1", c.Store.Memory.MaxKeys)
	}
	if (c.Listen.TLS.Cert == "") != (c.Listen.TLS.Key == "") {
		bad("--tls-cert and --tls-key: give both or neither")
	}
	if c.Listen.TLS.ClientCA != "" && c.Listen.TLS.Cert == "" {
		bad("--tls-client-ca: needs --tls-cert and --tls-key (mutual TLS is TLS first)")
	}
	for _, l := range []struct {
		flag string
		v    int
	}{
		{"--max-key-bytes", c.Limits.KeyBytes}, {"--max-value-bytes", c.Limits.ValueBytes},
		{"--max-descriptors", c.Limits.Descriptors}, {"--max-entries", c.Limits.Entries},
		{"--max-request-bytes", c.Limits.RequestBytes}, {"--max-detailed-metric-values", c.Limits.DetailedMetricValues},
	} {
		if l.v < 1 {
			bad("%s: %d, want at least 1 (every input has a bound)", l.flag, l.v)
		}
	}
	if c.Service.SampleSize < 0 || c.Service.SampleSize > service.MaxSampleSize {
		bad("--sample-size: %d, want 0 to %d", c.Service.SampleSize, service.MaxSampleSize)
	}
	if c.Service.SampleEvery < 1 {
		bad("--sample-every: %d, want at least 1", c.Service.SampleEvery)
	}
	if c.Service.ExpectedReplicas < 1 {
		bad("--expected-replicas: %d, want at least 1", c.Service.ExpectedReplicas)
	}
	if _, err := rules.ParseFailureMode(c.Service.DefaultFailureMode); err != nil {
		bad("--default-failure-mode: %v", err)
	}
	if c.Tenants.Resync <= 0 {
		bad("--tenants-resync: %v, want a positive duration", c.Tenants.Resync)
	}
	if c.Tenants.Migrate && c.Tenants.PostgresURL == "" {
		bad("--migrate: needs --postgres-url (or SLUICE_POSTGRES_URL)")
	}
	c.Tenants.validate(bad)
	switch c.Log.Format {
	case "text", "json":
	default:
		bad("--log-format: %q, want text or json", c.Log.Format)
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.Log.Level)); err != nil {
		bad("--log-level: %q, want debug, info, warn or error", c.Log.Level)
	}
	if c.ShutdownTimeout <= 0 {
		bad("--shutdown-timeout: %v, want a positive duration", c.ShutdownTimeout)
	}
	c.Guard.validate(bad)
	c.Notify.validate(bad)
	errs = append(errs, c.Envoy.validate(c.Listen.TLS, c.Store.Kind)...)
	return errors.Join(errs...)
}

// logger builds the server's logger on w.
func (c serveConfig) logger(w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(c.Log.Level)) // validated
	opts := &slog.HandlerOptions{Level: lvl, ReplaceAttr: scrubber{c.secrets()}.attr}
	if c.Log.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
