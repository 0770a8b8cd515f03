package redis_test

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
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/redis"
)

// tlsFiles is a CA and two pairs it signed, for a server on 127.0.0.1
// and a client, as PEM files and as parsed values.
type tlsFiles struct {
	caFile, certFile, keyFile string
	pool                      *x509.CertPool
	client                    tls.Certificate
}

func newTLSFiles(t *testing.T) tlsFiles {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, client bool) (certPEM, keyPEM []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "redis"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		if client {
			tmpl.ExtKeyUsage, tmpl.IPAddresses = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	f := tlsFiles{caFile: write("ca.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})), pool: x509.NewCertPool()}
	f.pool.AddCert(ca)
	c, k := issue(2, false)
	f.certFile, f.keyFile = write("server.pem", c), write("server.key", k)
	cc, ck := issue(3, true)
	if f.client, err = tls.X509KeyPair(cc, ck); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestTLS: Options.TLS reaches a Redis that serves TLS with a private CA
// and demands a client certificate; without the certificate, or without
// the CA, the store cannot connect.
func TestTLS(t *testing.T) {
	f := newTLSFiles(t)
	srv := redistest.StartTLS(t, f.certFile, f.keyFile, f.caFile, true)
	url := "redis://" + srv.TLSAddr() + "/0"
	for _, tc := range []struct {
		name   string
		cfg    *tls.Config
		wantOK bool
	}{
		{"CA and client certificate", &tls.Config{RootCAs: f.pool, Certificates: []tls.Certificate{f.client}}, true},
		{"no client certificate", &tls.Config{RootCAs: f.pool}, false},
		{"client certificate, system CAs", &tls.Config{Certificates: []tls.Certificate{f.client}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := redis.New(redis.Options{URL: url, TLS: tc.cfg, Timeout: 5 * time.Second})
			if err == nil {
				defer st.Close()
				ops := []sluice.Op{{Key: "tls", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 2, Window: time.Minute}, Cost: 1}}
				res := make([]sluice.Result, 1)
				err = st.Take(context.Background(), ops, res)
				if err == nil && (!res[0].Allowed || res[0].Remaining != 1) {
					t.Fatalf("Take over TLS = %+v, want allowed with 1 left", res[0])
				}
			}
			if (err == nil) != tc.wantOK {
				t.Errorf("connect and Take = %v, want ok=%v", err, tc.wantOK)
			}
		})
	}
}
