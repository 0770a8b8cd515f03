package main

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func parseServe(t *testing.T, args []string, envs map[string]string) (serveConfig, error) {
	t.Helper()
	cfg := defaultServeConfig()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.flags(fs)
	err := parseFlags(fs, args, func(k string) string { return envs[k] })
	return cfg, err
}

func TestServeConfigDefaultsAreValid(t *testing.T) {
	cfg := defaultServeConfig()
	cfg.Rules.Dir = "../../examples/rules"
	if err := cfg.Validate(); err != nil {
		t.Errorf("defaults (rules at the repo's examples) invalid: %v", err)
	}
	if cfg.Listen.GRPC != "127.0.0.1:8081" || cfg.Listen.HTTP != "127.0.0.1:8080" || cfg.Listen.Debug != "127.0.0.1:6070" || cfg.Store.Kind != "memory" {
		t.Errorf("defaults = %+v, want the documented ports and the memory store", cfg)
	}
}

func TestServeFlagsAndEnv(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		check func(serveConfig) string // "" when right
	}{
		{"flag", []string{"--grpc-addr", ":9000", "--expected-replicas=3"}, nil, func(c serveConfig) string {
			if c.Listen.GRPC != ":9000" || c.Service.ExpectedReplicas != 3 {
				return "flags not applied"
			}
			return ""
		}},
		{"env", nil, map[string]string{"SLUICE_STORE": "redis", "SLUICE_REDIS_URL": "redis://h:1/0", "SLUICE_REDIS_TIMEOUT": "20ms", "SLUICE_RESPONSE_HEADERS": "true"}, func(c serveConfig) string {
			if c.Store.Kind != "redis" || c.Store.Redis.URL != "redis://h:1/0" || c.Store.Redis.Timeout != 20*time.Millisecond || !c.Listen.ResponseHeaders {
				return "environment not applied"
			}
			return ""
		}},
		{"debug listener off from the environment", nil, map[string]string{"SLUICE_DEBUG_ADDR": "off"}, func(c serveConfig) string {
			c.Rules.Dir = "../../examples/rules"
			if debugOn(c.Listen.Debug) || c.Validate() != nil {
				return "SLUICE_DEBUG_ADDR=off did not turn the debug listener off validly"
			}
			return ""
		}},
		{"flag wins over env", []string{"--log-format", "json"}, map[string]string{"SLUICE_LOG_FORMAT": "text", "SLUICE_LOG_LEVEL": "debug"}, func(c serveConfig) string {
			if c.Log.Format != "json" || c.Log.Level != "debug" {
				return "flag did not win, or env not applied to the other flag"
			}
			return ""
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseServe(t, tt.args, tt.env)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if msg := tt.check(cfg); msg != "" {
				t.Errorf("%s: got %+v", msg, cfg)
			}
		})
	}
}

func TestServeConfigErrors(t *testing.T) {
	_, err := parseServe(t, nil, map[string]string{"SLUICE_EXPECTED_REPLICAS": "many"})
	if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "SLUICE_EXPECTED_REPLICAS") {
		t.Errorf("bad env value: error %v, want a usage error naming SLUICE_EXPECTED_REPLICAS", err)
	}
	if _, err := parseServe(t, []string{"--nope"}, nil); !errors.Is(err, errUsage) {
		t.Errorf("unknown flag: error %v, want a usage error", err)
	}

	cfg := defaultServeConfig()
	cfg.Rules.Dir = "does/not/exist"
	cfg.Rules.DefaultAlgorithm = "magic"
	cfg.Listen.GRPC = "nohostport"
	cfg.Store.Kind = "redis"
	cfg.Store.Redis.URL = ""
	cfg.Service.ExpectedReplicas = 0
	cfg.Service.DefaultFailureMode = "maybe"
	cfg.Log.Format = "xml"
	cfg.Log.Level = "loud"
	cfg.ShutdownTimeout = 0
	err = cfg.Validate()
	for _, want := range []string{"--rules", "--default-algorithm", "--grpc-addr", "--redis-url", "--expected-replicas", "--default-failure-mode", "--log-format", "--log-level", "--shutdown-timeout"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate error %v, want it to name %s", err, want)
		}
	}
	cfg = defaultServeConfig()
	cfg.Rules.Dir = "../../examples/rules"
	cfg.Store.Kind = "etcd"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `--store: "etcd"`) {
		t.Errorf("Validate with --store etcd: %v, want an error naming --store", err)
	}
}

func TestParseCheckArgs(t *testing.T) {
	noenv := func(string) string { return "" }
	c, err := parseCheckArgs([]string{"--domain", "edge", "remote_address=1.2.3.4", "--hits", "0", "path=/a=b"}, noenv, io.Discard)
	if err != nil {
		t.Fatalf("parseCheckArgs: %v", err)
	}
	if c.domain != "edge" || !c.hitsSet || c.hits != 0 || len(c.entries) != 2 || c.addr != "127.0.0.1:8081" ||
		c.entries[0].Key != "remote_address" || c.entries[0].Value != "1.2.3.4" || c.entries[1].Key != "path" || c.entries[1].Value != "/a=b" {
		t.Errorf("parseCheckArgs = %+v, want domain edge, hits 0, entries in order, default addr", c)
	}
	c, err = parseCheckArgs([]string{"--domain=d", "k=v"}, func(k string) string { return map[string]string{"SLUICE_CHECK_ADDR": "h:1"}[k] }, io.Discard)
	if err != nil || c.addr != "h:1" || c.hitsSet {
		t.Errorf("parseCheckArgs with SLUICE_CHECK_ADDR = %+v, %v, want addr h:1 and hits unset", c, err)
	}
	for _, args := range [][]string{
		{"k=v"},
		{"--domain", "d"},
		{"--domain", "d", "novalue"},
		{"--domain", "d", "=v"},
		{"--domain", "d", "k=v", "--hits", "-1"},
		{"--domain", "d", "k=v", "--hits", "x"},
	} {
		if _, err := parseCheckArgs(args, noenv, io.Discard); !errors.Is(err, errUsage) {
			t.Errorf("parseCheckArgs(%q) error = %v, want a usage error", args, err)
		}
	}
}
