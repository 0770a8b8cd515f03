package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// clientTLSConfig is how a client command (sluice check, sluice proxy
// --rls) reaches a server started with --tls-cert: TLS at all, the CA to
// trust (default: the system's), a client certificate for a server with
// --tls-client-ca, and the name to verify.
type clientTLSConfig struct {
	On               bool
	CA               string
	Cert, Key        string
	ServerName       string
	prefix, doesWhat string
}

// flags binds the fields to flags named prefix+"tls", prefix+"tls-ca", ….
func (c *clientTLSConfig) flags(fs *flag.FlagSet, prefix, doesWhat string) {
	c.prefix, c.doesWhat = prefix, doesWhat
	fs.BoolVar(&c.On, prefix+"tls", false, "speak TLS to "+doesWhat+" (implied by the other --"+prefix+"tls-* flags)")
	fs.StringVar(&c.CA, prefix+"tls-ca", "", "PEM CA certificates to verify "+doesWhat+" with (default: the system's)")
	fs.StringVar(&c.Cert, prefix+"tls-cert", "", "PEM client certificate, for a server with --tls-client-ca (with --"+prefix+"tls-key)")
	fs.StringVar(&c.Key, prefix+"tls-key", "", "PEM private key of --"+prefix+"tls-cert")
	fs.StringVar(&c.ServerName, prefix+"tls-server-name", "", "name to verify the server's certificate against (default: the address's host)")
}

// credentials returns the gRPC transport credentials: TLS when any TLS
// flag is set, else plaintext.
func (c clientTLSConfig) credentials() (grpc.DialOption, error) {
	cfg, err := c.config()
	if err != nil || cfg == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials()), err
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(cfg)), nil
}

// config returns the TLS configuration the flags ask for, nil when no TLS
// flag is set.
func (c clientTLSConfig) config() (*tls.Config, error) {
	if !c.On && c.CA == "" && c.Cert == "" && c.Key == "" && c.ServerName == "" {
		return nil, nil
	}
	flagName := func(s string) string { return "--" + c.prefix + s }
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CA != "" {
		pem, err := os.ReadFile(c.CA)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flagName("tls-ca"), err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: %s holds no PEM certificate", flagName("tls-ca"), c.CA)
		}
		cfg.RootCAs = pool
	}
	switch {
	case (c.Cert == "") != (c.Key == ""):
		return nil, fmt.Errorf("%s and %s: give both or neither: %w", flagName("tls-cert"), flagName("tls-key"), errUsage)
	case c.Cert != "":
		kp, err := tls.LoadX509KeyPair(c.Cert, c.Key)
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", flagName("tls-cert"), flagName("tls-key"), err)
		}
		cfg.Certificates = []tls.Certificate{kp}
	}
	return cfg, nil
}
