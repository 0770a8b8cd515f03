package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"os"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/sluice-rl/sluice/server/rls"
	"github.com/sluice-rl/sluice/service"
)

// envoyConfig holds the settings that match envoyproxy/ratelimit's (named
// after its environment variables in docs/envoy.md).
type envoyConfig struct {
	// LimitHeaders adds RateLimit-Limit, -Remaining and -Reset (or the
	// names below) to RLS answers (LIMIT_RESPONSE_HEADERS_ENABLED).
	LimitHeaders                              bool
	LimitHeader, RemainingHeader, ResetHeader string
	// DynamicMetadata fills RLS answers' dynamic_metadata
	// (RESPONSE_DYNAMIC_METADATA).
	DynamicMetadata bool
	// QuotaMode and ShadowMode apply to every rule (QUOTA_MODE,
	// SHADOW_MODE).
	QuotaMode, ShadowMode bool
	// ShadowStatusOK: with ShadowMode, over-limit descriptors report OK too
	// (service.Config.ShadowStatusOK).
	ShadowStatusOK bool
	// MergeDomains lets rule files share a domain (MERGE_DOMAIN_CONFIG).
	MergeDomains bool
	// GRPCUDS, if set, is a unix socket gRPC listens on instead of
	// --grpc-addr (GRPC_UDS).
	GRPCUDS string
	// MaxConnAge and MaxConnAgeGrace: a gRPC connection is asked to go
	// away after MaxConnAge (± 10% jitter, from grpc-go) and closed
	// MaxConnAgeGrace later (GRPC_MAX_CONNECTION_AGE, …_GRACE); 0 means
	// never.
	MaxConnAge, MaxConnAgeGrace time.Duration
	// ClientTLSSAN, if set, is a subject alternative name a client
	// certificate must carry (GRPC_CLIENT_TLS_SAN); needs --tls-client-ca.
	ClientTLSSAN string
	// RedisTLSCA, RedisTLSCert and RedisTLSKey speak TLS to Redis with a
	// private CA and a client certificate (REDIS_TLS_CACERT,
	// REDIS_TLS_CLIENT_CERT, REDIS_TLS_CLIENT_KEY).
	RedisTLSCA, RedisTLSCert, RedisTLSKey string
	// Tracing is OpenTelemetry tracing of RLS calls (TRACING_*).
	Tracing tracingConfig
}

func defaultEnvoyConfig() envoyConfig {
	n := rls.DefaultLimitHeaderNames()
	return envoyConfig{LimitHeader: n.Limit, RemainingHeader: n.Remaining, ResetHeader: n.Reset,
		MaxConnAge: 24 * time.Hour, MaxConnAgeGrace: time.Hour,
		Tracing: tracingConfig{ServiceName: "sluice", SamplingRate: 1}}
}

func (c *envoyConfig) flags(fs *flag.FlagSet) {
	fs.BoolVar(&c.LimitHeaders, "limit-headers", c.LimitHeaders, "add envoyproxy/ratelimit's RateLimit-Limit, -Remaining and -Reset to RLS answers (names: --limit-header, --remaining-header, --reset-header)")
	fs.StringVar(&c.LimitHeader, "limit-header", c.LimitHeader, "name of the limit header of --limit-headers")
	fs.StringVar(&c.RemainingHeader, "remaining-header", c.RemainingHeader, "name of the remaining header of --limit-headers")
	fs.StringVar(&c.ResetHeader, "reset-header", c.ResetHeader, "name of the reset header of --limit-headers")
	fs.BoolVar(&c.DynamicMetadata, "response-dynamic-metadata", c.DynamicMetadata, "fill RLS answers' dynamic_metadata: domain, descriptors, hits and the rules' metadata")
	fs.BoolVar(&c.QuotaMode, "quota-mode", c.QuotaMode, "every descriptor in quota mode: a request is denied only when all its limits are over")
	fs.BoolVar(&c.ShadowMode, "shadow-mode", c.ShadowMode, "every rule in shadow mode: limits count, nothing is denied (the overall code is OK; an over-limit descriptor's status stays OVER_LIMIT, as envoyproxy/ratelimit's SHADOW_MODE)")
	fs.BoolVar(&c.ShadowStatusOK, "shadow-mode-status-ok", c.ShadowStatusOK, "with --shadow-mode, report an over-limit descriptor's status as OK too (Sluice's behaviour before it matched the peer)")
	fs.BoolVar(&c.MergeDomains, "merge-domains", c.MergeDomains, "let rule files share a domain: their top-level descriptors merge")
	fs.StringVar(&c.GRPCUDS, "grpc-uds", c.GRPCUDS, "unix socket gRPC listens on instead of --grpc-addr")
	fs.DurationVar(&c.MaxConnAge, "grpc-max-connection-age", c.MaxConnAge, "ask a gRPC client to reconnect after this long (spreads load over new replicas); 0: never")
	fs.DurationVar(&c.MaxConnAgeGrace, "grpc-max-connection-age-grace", c.MaxConnAgeGrace, "then close the connection after this long more; 0: never")
	fs.StringVar(&c.RedisTLSCA, "redis-tls-ca", c.RedisTLSCA, "PEM CA certificates to verify Redis with: speak TLS to Redis (default for rediss://: the system's CAs)")
	fs.StringVar(&c.RedisTLSCert, "redis-tls-cert", c.RedisTLSCert, "PEM client certificate for Redis (with --redis-tls-key): speak TLS to Redis")
	fs.StringVar(&c.RedisTLSKey, "redis-tls-key", c.RedisTLSKey, "PEM private key of --redis-tls-cert")
	c.Tracing.flags(fs)
	fs.StringVar(&c.ClientTLSSAN, "tls-client-san", c.ClientTLSSAN, "subject alternative name (DNS, URI, IP or email) every client certificate must carry (needs --tls-client-ca)")
}

// validate reports every bad field.
func (c envoyConfig) validate(t tlsConfig, store string) []error {
	var errs []error
	if (c.RedisTLSCert == "") != (c.RedisTLSKey == "") {
		errs = append(errs, errors.New("--redis-tls-cert and --redis-tls-key: give both or neither"))
	}
	if (c.RedisTLSCA != "" || c.RedisTLSCert != "") && store != "redis" {
		errs = append(errs, fmt.Errorf("--redis-tls-ca, --redis-tls-cert: need --store redis (got %q)", store))
	}
	if c.LimitHeaders {
		if err := c.headerNames().Validate(); err != nil {
			errs = append(errs, fmt.Errorf("--limit-header, --remaining-header, --reset-header: %w", err))
		}
	}
	if c.MaxConnAge < 0 {
		errs = append(errs, fmt.Errorf("--grpc-max-connection-age: %v, want a positive duration or 0 (never)", c.MaxConnAge))
	}
	if c.MaxConnAgeGrace < 0 {
		errs = append(errs, fmt.Errorf("--grpc-max-connection-age-grace: %v, want a positive duration or 0 (never)", c.MaxConnAgeGrace))
	}
	if c.ClientTLSSAN != "" && t.ClientCA == "" {
		errs = append(errs, errors.New("--tls-client-san: needs --tls-client-ca (a SAN is checked on a verified client certificate)"))
	}
	errs = append(errs, c.Tracing.validate()...)
	if len(c.GRPCUDS) > 104 { // sun_path is 108 bytes on Linux, 104 on BSDs
		errs = append(errs, fmt.Errorf("--grpc-uds: %d bytes, at most 104", len(c.GRPCUDS)))
	}
	return errs
}

func (c envoyConfig) headerNames() rls.LimitHeaderNames {
	return rls.LimitHeaderNames{Limit: c.LimitHeader, Remaining: c.RemainingHeader, Reset: c.ResetHeader}
}

// rlsOptions sets the RLS server's envoy options in o.
func (c envoyConfig) rlsOptions(o *rls.Options) {
	if c.LimitHeaders {
		n := c.headerNames()
		o.LimitHeaders = &n
	}
	o.DynamicMetadata = c.DynamicMetadata
}

// engine sets the engine's global modes in cfg.
func (c envoyConfig) engine(cfg *service.Config) {
	cfg.QuotaMode, cfg.ShadowMode, cfg.ShadowStatusOK = c.QuotaMode, c.ShadowMode, c.ShadowStatusOK
}

// grpcOptions are the gRPC server's connection-age options.
func (c envoyConfig) grpcOptions() []grpc.ServerOption {
	if c.MaxConnAge == 0 && c.MaxConnAgeGrace == 0 {
		return nil
	}
	kp := keepalive.ServerParameters{MaxConnectionAge: c.MaxConnAge, MaxConnectionAgeGrace: c.MaxConnAgeGrace}
	// grpc-go reads zero as "infinity" in both.
	return []grpc.ServerOption{grpc.KeepaliveParams(kp)}
}

// redisTLS is the TLS configuration of the Redis connections, or nil when
// no --redis-tls-* flag is given (the URL's scheme decides then).
func (c envoyConfig) redisTLS() (*tls.Config, error) {
	if c.RedisTLSCA == "" && c.RedisTLSCert == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.RedisTLSCA != "" {
		pem, err := os.ReadFile(c.RedisTLSCA)
		if err != nil {
			return nil, fmt.Errorf("--redis-tls-ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--redis-tls-ca: %s holds no PEM certificate", c.RedisTLSCA)
		}
	}
	if c.RedisTLSCert != "" {
		kp, err := tls.LoadX509KeyPair(c.RedisTLSCert, c.RedisTLSKey)
		if err != nil {
			return nil, fmt.Errorf("--redis-tls-cert/--redis-tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{kp}
	}
	return cfg, nil
}

// requireSAN makes cfg refuse a client certificate that lacks san among
// its DNS names, URIs, IP addresses or email addresses (the chain is
// verified first, against ClientCAs).
func requireSAN(cfg *tls.Config, san string) {
	cfg.VerifyPeerCertificate = func(_ [][]byte, chains [][]*x509.Certificate) error {
		if len(chains) == 0 || len(chains[0]) == 0 {
			return errors.New("tls: no verified client certificate")
		}
		if hasSAN(chains[0][0], san) {
			return nil
		}
		return fmt.Errorf("tls: client certificate does not carry the subject alternative name %q", san)
	}
}

func hasSAN(c *x509.Certificate, san string) bool {
	if slices.Contains(c.DNSNames, san) || slices.Contains(c.EmailAddresses, san) {
		return true
	}
	for _, u := range c.URIs {
		if u.String() == san {
			return true
		}
	}
	ip := net.ParseIP(san)
	for _, a := range c.IPAddresses {
		if ip != nil && a.Equal(ip) {
			return true
		}
	}
	return false
}

// listenUDS listens on a unix socket at path, removing a stale socket file
// left there by a process that died (never a file of another kind).
func listenUDS(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSocket != 0 {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s: another process is listening there", path)
		}
		_ = os.Remove(path)
	}
	return net.Listen("unix", path)
}
