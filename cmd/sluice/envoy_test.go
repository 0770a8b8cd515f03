package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-rl/sluice/internal/redistest"
)

// issueClient returns a PEM client certificate and key signed by ca,
// carrying the DNS names given as subject alternative names.
func (ca *testCA) issueClient(t *testing.T, dns ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "envoy"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		DNSNames: dns,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// mtlsFiles writes a CA, a server pair for 127.0.0.1 and two client pairs
// (one with the SAN envoy.mesh.local, one without) to a temporary directory.
type mtlsFiles struct {
	dir, ca, cert, key, goodCert, goodKey, plainCert, plainKey string
}

func newMTLSFiles(t *testing.T) mtlsFiles {
	t.Helper()
	ca := newCA(t)
	dir := t.TempDir()
	f := mtlsFiles{dir: dir}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		writePEM(t, p, b)
		return p
	}
	f.ca = write("ca.pem", ca.pem)
	c, k := ca.issue(t, "sluice", false)
	f.cert, f.key = write("cert.pem", c), write("key.pem", k)
	c, k = ca.issueClient(t, "envoy.mesh.local")
	f.goodCert, f.goodKey = write("good.pem", c), write("good.key", k)
	c, k = ca.issueClient(t, "other.mesh.local")
	f.plainCert, f.plainKey = write("plain.pem", c), write("plain.key", k)
	return f
}

func (f mtlsFiles) creds(t *testing.T, cert, key string) credentials.TransportCredentials {
	t.Helper()
	pool := x509.NewCertPool()
	b, _ := os.ReadFile(f.ca)
	pool.AppendCertsFromPEM(b)
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return credentials.NewTLS(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}})
}

// TestClientTLSSAN: with --tls-client-san, a client certificate from the
// CA is accepted only if it carries the name.
func TestClientTLSSAN(t *testing.T) {
	f := newMTLSFiles(t)
	ts := startServer(t, filepath.Join(repoRoot, "examples/rules"), func(c *serveConfig) {
		c.Listen.TLS = tlsConfig{Cert: f.cert, Key: f.key, ClientCA: f.ca}
		c.Envoy.ClientTLSSAN = "envoy.mesh.local"
	})
	if err := grpcCheck(t, ts.grpcAddr(), f.creds(t, f.goodCert, f.goodKey)); err != nil {
		t.Errorf("client certificate with the SAN: %v, want accepted", err)
	}
	if err := grpcCheck(t, ts.grpcAddr(), f.creds(t, f.plainCert, f.plainKey)); err == nil {
		t.Errorf("client certificate without the SAN accepted, want refused")
	}
}

// TestCheckTLS: sluice check reaches a server with TLS and mutual TLS
// through its --tls-* flags, and not without them.
func TestCheckTLS(t *testing.T) {
	f := newMTLSFiles(t)
	ts := startServer(t, filepath.Join(repoRoot, "examples/rules"), func(c *serveConfig) {
		c.Listen.TLS = tlsConfig{Cert: f.cert, Key: f.key, ClientCA: f.ca}
	})
	run := func(extra ...string) (string, error) {
		var out, errb bytes.Buffer
		args := append([]string{"--addr", ts.grpcAddr(), "--domain", "edge", "--timeout", "10s"}, extra...)
		args = append(args, "remote_address=1.2.3.4")
		err := runCheck(context.Background(), args, func(string) string { return "" }, &out, &errb)
		return out.String(), err
	}
	if out, err := run("--tls-ca", f.ca, "--tls-cert", f.goodCert, "--tls-key", f.goodKey); err != nil || !strings.Contains(out, "OK") {
		t.Errorf("check over mutual TLS = %q, %v; want an OK answer", out, err)
	}
	if _, err := run(); err == nil {
		t.Errorf("check in plain text to a TLS server succeeded, want an error")
	}
	if _, err := run("--tls-ca", f.ca); err == nil {
		t.Errorf("check without a client certificate to a mutual-TLS server succeeded, want an error")
	}
	if _, err := run("--tls-cert", f.goodCert); err == nil || !strings.Contains(err.Error(), "--tls-cert and --tls-key: give both or neither") {
		t.Errorf("check with --tls-cert alone = %v, want both-or-neither", err)
	}
}

// TestGRPCUDS: with --grpc-uds the RLS answers on the unix socket.
func TestGRPCUDS(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "rls.sock")
	startServer(t, filepath.Join(repoRoot, "examples/rules"), func(c *serveConfig) { c.Envoy.GRPCUDS = sock })
	if err := grpcCheck(t, "unix://"+sock, insecure.NewCredentials()); err != nil {
		t.Errorf("check over the unix socket: %v", err)
	}
}

// TestMaxConnectionAge: a connection older than --grpc-max-connection-age
// is asked to go away (the client's connection leaves READY), and a new
// one serves.
func TestMaxConnectionAge(t *testing.T) {
	t.Parallel() // its own server and processes; it mostly waits for them
	ts := startServer(t, filepath.Join(repoRoot, "examples/rules"), func(c *serveConfig) {
		c.Envoy.MaxConnAge, c.Envoy.MaxConnAgeGrace = 300*time.Millisecond, time.Second
	})
	conn, err := grpc.NewClient(ts.grpcAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Connect()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sawReady := false
	for s := conn.GetState(); ; s = conn.GetState() {
		if s == connectivity.Ready {
			sawReady = true
		} else if sawReady {
			break // went away: GOAWAY after the maximum age
		}
		if !conn.WaitForStateChange(ctx, s) {
			t.Fatalf("connection stayed %v for 30s; want READY and then GOAWAY", s)
		}
	}
	if err := grpcCheck(t, ts.grpcAddr(), insecure.NewCredentials()); err != nil {
		t.Errorf("check after the connection aged out: %v", err)
	}
}

func TestEnvoyConfigErrors(t *testing.T) {
	cfg := defaultServeConfig()
	cfg.Rules.Dir = filepath.Join(repoRoot, "examples/rules")
	cfg.Envoy.LimitHeaders, cfg.Envoy.RemainingHeader = true, "Rate Limit"
	cfg.Envoy.MaxConnAge = -time.Second
	cfg.Envoy.ClientTLSSAN = "envoy"
	cfg.Envoy.GRPCUDS = "/" + strings.Repeat("s", 120)
	err := cfg.Validate()
	for _, want := range []string{
		`--limit-header, --remaining-header, --reset-header: rls: remaining header name "Rate Limit": byte ' '`,
		"--grpc-max-connection-age: -1s",
		"--tls-client-san: needs --tls-client-ca",
		"--grpc-uds: 121 bytes, at most 104",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, want it to contain %q", err, want)
		}
	}
	def := defaultServeConfig()
	if def.Envoy.MaxConnAge != 24*time.Hour || def.Envoy.MaxConnAgeGrace != time.Hour || def.Envoy.LimitHeader != "RateLimit-Limit" {
		t.Errorf("defaults = %+v, want envoyproxy/ratelimit's (24h, 1h, RateLimit-Limit)", def.Envoy)
	}
}

// sluice proxy's --rls-tls-* flags need --rls.
func TestProxyRLSTLSNeedsRLS(t *testing.T) {
	var out, errb bytes.Buffer
	err := runProxy(context.Background(), []string{"--upstream", "http://127.0.0.1:1", "--rules", filepath.Join(repoRoot, "examples/rules"),
		"--domain", "edge", "--rls-tls-ca", "ca.pem"}, func(string) string { return "" }, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), "--rls-tls-ca: needs --rls") {
		t.Errorf("runProxy = %v, want --rls-tls-ca: needs --rls", err)
	}
}

// sluice validate --merge-domains loads files that share a domain.
func TestValidateMergeDomains(t *testing.T) {
	dir := filepath.Join(repoRoot, "rules/testdata/merge")
	var out, errb bytes.Buffer
	noEnv := func(string) string { return "" }
	if err := runValidate(context.Background(), []string{dir}, noEnv, &out, &errb); err == nil || !strings.Contains(out.String(), "is already defined") {
		t.Errorf("validate without --merge-domains = %v, %q; want the duplicate domain", err, out.String())
	}
	out.Reset()
	if err := runValidate(context.Background(), []string{"--merge-domains", dir}, noEnv, &out, &errb); err != nil || !strings.Contains(out.String(), "ok: 1 domain(s), 2 rule(s)") {
		t.Errorf("validate --merge-domains = %v, %q; want ok: 1 domain(s), 2 rule(s)", err, out.String())
	}
}

// TestRedisTLS: serve reaches a Redis that serves TLS with a private CA
// and demands a client certificate, through --redis-tls-ca,
// --redis-tls-cert and --redis-tls-key.
func TestRedisTLS(t *testing.T) {
	ca := newCA(t)
	dir := t.TempDir()
	file := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		writePEM(t, p, b)
		return p
	}
	sc, sk := ca.issue(t, "redis", false)
	cc, ck := ca.issue(t, "sluice", true)
	caFile, certFile, keyFile := file("ca.pem", ca.pem), file("client.pem", cc), file("client.key", ck)
	srv := redistest.StartTLS(t, file("server.pem", sc), file("server.key", sk), caFile, true)
	ts := startServer(t, filepath.Join(repoRoot, "examples/rules"), func(c *serveConfig) {
		c.Store.Kind = "redis"
		c.Store.Redis.URL = "redis://" + srv.TLSAddr() + "/0"
		c.Envoy.RedisTLSCA, c.Envoy.RedisTLSCert, c.Envoy.RedisTLSKey = caFile, certFile, keyFile
	})
	if err := grpcCheck(t, ts.grpcAddr(), insecure.NewCredentials()); err != nil {
		t.Fatalf("check: %v", err)
	}
	keys, err := srv.Do("DBSIZE")
	if n, ok := keys.(int64); err != nil || !ok || n == 0 {
		t.Errorf("Redis over TLS holds %v keys (%v) after a check, want some", keys, err)
	}
	bad := defaultServeConfig()
	bad.Rules.Dir = filepath.Join(repoRoot, "examples/rules")
	bad.Envoy.RedisTLSCert = certFile
	err = bad.Validate()
	for _, want := range []string{"--redis-tls-cert and --redis-tls-key: give both or neither", `need --store redis (got "memory")`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, want %q", err, want)
		}
	}
}
