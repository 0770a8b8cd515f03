package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// serverTLS builds the TLS configuration of the gRPC and HTTP listeners
// from c, or returns nil when TLS is off. The certificate and key are read
// now (so a bad pair fails at start) and again when either file changes,
// checked at most every certCheckEvery, so a rotated certificate is picked
// up without a restart. The client CA is read once.
func serverTLS(c tlsConfig) (*tls.Config, error) {
	if c.Cert == "" {
		return nil, nil
	}
	kp := &keyPair{cert: c.Cert, key: c.Key}
	if err := kp.load(); err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		CipherSuites:   aeadSuites,
		GetCertificate: kp.get,
	}
	if c.ClientCA != "" {
		pem, err := os.ReadFile(c.ClientCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-client-ca: %s holds no PEM certificate", c.ClientCA)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// aeadSuites are the TLS 1.2 suites offered: ECDHE (forward secrecy) with
// an AEAD cipher only, no CBC-mode suite (Lucky13-style padding oracles,
// SHA-1 MACs). TLS 1.3 suites are not configurable and are all AEAD.
var aeadSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// certCheckEvery is how often a handshake may look at the key pair's files.
// (A variable so tests can shorten it.)
var certCheckEvery = 10 * time.Second

// keyPair is a certificate and key read from files, reloaded when they
// change. Safe for concurrent use.
type keyPair struct {
	cert, key string

	mu      sync.Mutex
	current *tls.Certificate
	stamp   [2]time.Time // modification times of cert and key when loaded
	checked time.Time
}

func (k *keyPair) stamps() ([2]time.Time, error) {
	var st [2]time.Time
	for i, f := range []string{k.cert, k.key} {
		fi, err := os.Stat(f)
		if err != nil {
			return st, err
		}
		st[i] = fi.ModTime()
	}
	return st, nil
}

// load reads the pair. Requires k.mu or exclusive use.
func (k *keyPair) load() error {
	st, err := k.stamps()
	if err != nil {
		return fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	c, err := tls.LoadX509KeyPair(k.cert, k.key)
	if err != nil {
		return fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	k.current, k.stamp, k.checked = &c, st, time.Now()
	return nil
}

// get is tls.Config.GetCertificate: the current pair, reloaded first if its
// files changed. A pair that fails to load (half written, say) keeps the
// previous one in service until the next check.
func (k *keyPair) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if time.Since(k.checked) >= certCheckEvery {
		k.checked = time.Now()
		if st, err := k.stamps(); err == nil && st != k.stamp {
			_ = k.load() // on error the old pair stays
		}
	}
	if k.current == nil {
		return nil, errors.New("no certificate loaded")
	}
	return k.current, nil
}
