package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// testCA is a certificate authority made by the test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

var serial int64

func newCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "sluice test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a PEM certificate and key signed by ca, for 127.0.0.1
// (server) or a client.
func (ca *testCA) issue(t *testing.T, cn string, client bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	if client {
		tmpl.ExtKeyUsage, tmpl.IPAddresses = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil
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

func writePEM(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// grpcCheck asks addr over gRPC with creds and returns the error.
func grpcCheck(t *testing.T, addr string, creds credentials.TransportCredentials) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", "1.2.3.4")}})
	return err
}

// httpCheck posts a check to https://addr with client c.
func httpCheck(c *http.Client, scheme, addr string) (int, error) {
	resp, err := c.Post(scheme+"://"+addr+"/v1/check", "application/json",
		strings.NewReader(`{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"1.2.3.4"}]}]}`))
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func TestTLS(t *testing.T) {
	ca := newCA(t)
	dir := t.TempDir()
	certFile, keyFile, caFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "ca.pem")
	c, k := ca.issue(t, "sluice", false)
	writePEM(t, certFile, c)
	writePEM(t, keyFile, k)
	writePEM(t, caFile, ca.pem)
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)

	ts := startServer(t, filepath.Join(repoRoot, "examples/rules"), func(c *serveConfig) {
		c.Listen.TLS = tlsConfig{Cert: certFile, Key: keyFile}
	})
	if err := grpcCheck(t, ts.grpcAddr(), credentials.NewTLS(&tls.Config{RootCAs: roots})); err != nil {
		t.Errorf("gRPC over TLS: %v", err)
	}
	if err := grpcCheck(t, ts.grpcAddr(), insecure.NewCredentials()); err == nil {
		t.Errorf("gRPC in plain text to a TLS listener succeeded, want an error")
	}
	tlsClient := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	if code, err := httpCheck(tlsClient, "https", ts.httpAddr()); err != nil || code != 200 {
		t.Errorf("HTTPS check = %d, %v, want 200", code, err)
	}
	if code, err := httpCheck(&http.Client{Timeout: 5 * time.Second}, "http", ts.httpAddr()); err == nil && code == 200 {
		t.Errorf("plain HTTP check to a TLS listener = 200, want refused")
	}
	if _, err := httpCheck(&http.Client{Timeout: 5 * time.Second}, "https", ts.httpAddr()); err == nil {
		t.Errorf("HTTPS check trusting no CA succeeded, want a certificate error")
	}
	// TLS 1.2 offers AEAD suites only: a client offering nothing but a
	// CBC suite finds no suite in common; one offering GCM is served.
	for _, tc := range []struct {
		suite uint16
		ok    bool
	}{
		{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, false},
		{tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA, false},
		{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, true},
		{tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, true},
	} {
		conn, err := tls.Dial("tcp", ts.httpAddr(), &tls.Config{RootCAs: roots, MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tc.suite}})
		if err == nil {
			conn.Close()
		}
		if (err == nil) != tc.ok {
			t.Errorf("TLS 1.2 handshake offering only %s: err %v, want success %v", tls.CipherSuiteName(tc.suite), err, tc.ok)
		}
	}
}

func TestMutualTLS(t *testing.T) {
	ca, other := newCA(t), newCA(t)
	dir := t.TempDir()
	certFile, keyFile, caFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "ca.pem")
	c, k := ca.issue(t, "sluice", false)
	writePEM(t, certFile, c)
	writePEM(t, keyFile, k)
	writePEM(t, caFile, ca.pem)
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	clientPair := func(ca *testCA) []tls.Certificate {
		cp, kp := ca.issue(t, "envoy", true)
		pair, err := tls.X509KeyPair(cp, kp)
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{pair}
	}

	ts := startServer(t, filepath.Join(repoRoot, "examples/rules"), func(c *serveConfig) {
		c.Listen.TLS = tlsConfig{Cert: certFile, Key: keyFile, ClientCA: caFile}
	})
	for _, tt := range []struct {
		name   string
		certs  []tls.Certificate
		wantOK bool
	}{
		{"client certificate from the CA", clientPair(ca), true},
		{"no client certificate", nil, false},
		{"client certificate from another CA", clientPair(other), false},
	} {
		cfg := &tls.Config{RootCAs: roots, Certificates: tt.certs}
		err := grpcCheck(t, ts.grpcAddr(), credentials.NewTLS(cfg))
		if (err == nil) != tt.wantOK {
			t.Errorf("%s: gRPC error = %v, want ok=%v", tt.name, err, tt.wantOK)
		}
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
		code, err := httpCheck(hc, "https", ts.httpAddr())
		if (err == nil && code == 200) != tt.wantOK {
			t.Errorf("%s: HTTPS check = %d, %v, want ok=%v", tt.name, code, err, tt.wantOK)
		}
	}
}

// A certificate replaced on disk is served from the next handshake after
// the check interval, without a restart.
func TestTLSCertificateReload(t *testing.T) {
	old := certCheckEvery
	certCheckEvery = 0
	defer func() { certCheckEvery = old }()
	ca := newCA(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	c, k := ca.issue(t, "first", false)
	writePEM(t, certFile, c)
	writePEM(t, keyFile, k)
	ts := startServer(t, filepath.Join(repoRoot, "examples/rules"), func(c *serveConfig) {
		c.Listen.TLS = tlsConfig{Cert: certFile, Key: keyFile}
	})
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	served := func() string {
		conn, err := tls.Dial("tcp", ts.httpAddr(), &tls.Config{RootCAs: roots})
		if err != nil {
			t.Fatalf("TLS dial: %v", err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if got := served(); got != "first" {
		t.Fatalf("served certificate %q, want first", got)
	}
	c, k = ca.issue(t, "second", false)
	writePEM(t, certFile, c)
	writePEM(t, keyFile, k)
	future := time.Now().Add(time.Minute) // a modification time the check cannot miss
	for _, f := range []string{certFile, keyFile} {
		if err := os.Chtimes(f, future, future); err != nil {
			t.Fatal(err)
		}
	}
	if got := served(); got != "second" {
		t.Errorf("served certificate %q after rotation, want second", got)
	}
}

func TestTLSConfigErrors(t *testing.T) {
	cfg := defaultServeConfig()
	cfg.Rules.Dir = filepath.Join(repoRoot, "examples/rules")
	cfg.Listen.TLS = tlsConfig{Cert: "x.pem"}
	cfg.Listen.TLS.ClientCA = "ca.pem"
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "--tls-cert and --tls-key: give both or neither") {
		t.Errorf("Validate with a cert and no key = %v, want both-or-neither", err)
	}
	if _, err := serverTLS(tlsConfig{Cert: "/nonexistent/cert.pem", Key: "/nonexistent/key.pem"}); err == nil || !strings.Contains(err.Error(), "--tls-cert") {
		t.Errorf("serverTLS of missing files = %v, want an error naming --tls-cert", err)
	}
}
