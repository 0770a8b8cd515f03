package admin

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// MinTokenLen is the shortest token accepted, in bytes.
const MinTokenLen = 16

// maxTokenFile bounds a token file's size.
const maxTokenFile = 1 << 20

// Tokens are the bearer tokens the admin API accepts. The zero value holds
// none (every request is refused). A Tokens is read-only once built and
// safe for concurrent use. It keeps SHA-256 digests, not the tokens.
type Tokens struct {
	entries []token
	guard   *guard // see Guard; nil: the defaults
}

type token struct {
	name   string
	digest [sha256.Size]byte
	access Access
}

// Access is what a token may do.
type Access uint8

const (
	// ReadOnly reads the admin API and the dashboard ("ro" in a token file).
	ReadOnly Access = iota
	// ReadWrite also changes things: quotas, switches, resets, and POST
	// /v1/charge ("rw").
	ReadWrite
	// ChargeOnly may only settle costs through POST /v1/charge, and read or
	// change nothing else ("charge"): the token to give a service that
	// reports its real costs, so it cannot rewrite anybody's quota.
	ChargeOnly
)

// String returns the access's token-file spelling: "ro", "rw" or "charge".
func (a Access) String() string {
	switch a {
	case ReadOnly:
		return "ro"
	case ReadWrite:
		return "rw"
	case ChargeOnly:
		return "charge"
	}
	return "unknown"
}

// parseAccess reads a token file's access field.
func parseAccess(s string) (Access, bool) {
	for _, a := range []Access{ReadOnly, ReadWrite, ChargeOnly} {
		if s == a.String() {
			return a, true
		}
	}
	return 0, false
}

// Len returns the number of tokens.
func (t *Tokens) Len() int {
	if t == nil {
		return 0
	}
	return len(t.entries)
}

// Add adds a token named name (the actor in audit rows) with the given
// access. The token must be at least MinTokenLen bytes of printable ASCII
// without spaces.
func (t *Tokens) Add(name string, access Access, tok string) error {
	if name == "" || strings.ContainsAny(name, " \t\r\n") {
		return fmt.Errorf("token name %q: want one word", name)
	}
	if len(tok) < MinTokenLen {
		return fmt.Errorf("token %q: shorter than %d bytes", name, MinTokenLen)
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] <= ' ' || tok[i] > '~' {
			return fmt.Errorf("token %q: want printable ASCII without spaces", name)
		}
	}
	if access.String() == "unknown" {
		return fmt.Errorf("token %q: unknown access %d", name, access)
	}
	t.entries = append(t.entries, token{name: name, digest: sha256.Sum256([]byte(tok)), access: access})
	return nil
}

// ParseTokens reads a token file: one token per line as
//
//	<name> <rw|ro|charge> <token>
//
// where rw may change things, ro only read, and charge only settle costs
// (POST /v1/charge; see Access); blank lines and lines starting with # are
// ignored. Errors name the line, never the token.
func ParseTokens(data []byte) (*Tokens, error) {
	if len(data) > maxTokenFile {
		return nil, fmt.Errorf("token file larger than %d bytes", maxTokenFile)
	}
	t := &Tokens{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxTokenFile)
	var errs []error
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		f := strings.Fields(s)
		if len(f) == 1 {
			errs = append(errs, fmt.Errorf("line %d: a bare token (the format of the client's --token-file): want <name> <rw|ro|charge> <token>", line))
			continue
		}
		if len(f) != 3 {
			errs = append(errs, fmt.Errorf("line %d: want <name> <rw|ro|charge> <token>, got %d fields", line, len(f)))
			continue
		}
		access, ok := parseAccess(f[1])
		if !ok {
			errs = append(errs, fmt.Errorf("line %d: access %q, want rw, ro or charge", line, f[1]))
			continue
		}
		if err := t.Add(f[0], access, f[2]); err != nil {
			errs = append(errs, fmt.Errorf("line %d: %w", line, err))
		}
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, err)
	}
	return t, errors.Join(errs...)
}

// LoadTokens reads the token file at path (see ParseTokens).
func LoadTokens(path string) (*Tokens, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("admin tokens: %w", err)
	}
	t, err := ParseTokens(data)
	if err != nil {
		return nil, fmt.Errorf("admin tokens: %s: %w", path, err)
	}
	return t, nil
}

// check finds the token of an Authorization header value. It compares the
// digest with every token's, without stopping early, so the time it takes
// says nothing about which token, or how much of one, matched.
//
// Besides "Bearer <token>" it takes HTTP Basic credentials whose password
// is the token (the user name is ignored), which is what a browser sends
// for the dashboard; admit refuses them on state-changing requests.
func (t *Tokens) check(header string) (name string, access Access, ok bool) {
	if t == nil {
		return "", 0, false
	}
	tok, found := bearerToken(header)
	if !found {
		r := http.Request{Header: http.Header{"Authorization": {header}}}
		_, pass, basic := r.BasicAuth()
		if !basic {
			return "", 0, false
		}
		tok = pass
	}
	d := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	for i := range t.entries {
		e := &t.entries[i]
		if subtle.ConstantTimeCompare(d[:], e.digest[:]) == 1 {
			name, access, ok = e.name, e.access, true
		}
	}
	return name, access, ok
}

// bearerToken returns the credentials of an Authorization header value in
// the Bearer scheme, and whether it is one. The scheme's name is compared
// without regard to case (RFC 9110 §11.1: "bearer", "BEARER" and "Bearer"
// are the same scheme) and may be followed by more than one space.
func bearerToken(header string) (string, bool) {
	const scheme = "Bearer"
	if len(header) <= len(scheme) || !strings.EqualFold(header[:len(scheme)], scheme) || header[len(scheme)] != ' ' {
		return "", false
	}
	return strings.TrimLeft(header[len(scheme):], " "), true
}

// need is what an endpoint asks of a token.
type need uint8

const (
	needRead   need = iota // ReadOnly or ReadWrite
	needWrite              // ReadWrite
	needCharge             // ReadWrite or ChargeOnly
)

// allows reports whether access a satisfies n.
func (a Access) allows(n need) bool {
	switch n {
	case needRead:
		return a == ReadOnly || a == ReadWrite
	case needWrite:
		return a == ReadWrite
	case needCharge:
		return a == ReadWrite || a == ChargeOnly
	}
	return false
}

// authorize admits a request carrying a valid token whose access allows n,
// answering the refusals itself (see admit); it returns the token's name,
// the actor of audit rows.
func (t *Tokens) authorize(w http.ResponseWriter, r *http.Request, n need) (name string, ok bool) {
	return t.admit(w, r, n, `Bearer realm="sluice admin"`)
}

// forbidden says why a valid token was refused.
func forbidden(name string, a Access) string {
	switch a {
	case ReadOnly:
		return fmt.Sprintf("token %q is read-only", name)
	case ChargeOnly:
		return fmt.Sprintf("token %q may only charge (POST /v1/charge)", name)
	}
	return fmt.Sprintf("token %q may not do this", name)
}

// Charge returns middleware that admits requests carrying a read-write or
// a charge-only bearer token, and answers 401 without a valid token and 403
// for a read-only one. `sluice serve` guards POST /v1/charge with it: a
// charge can refund quota.
func (t *Tokens) Charge() func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, ok := t.authorize(w, r, needCharge); ok {
				next.ServeHTTP(w, r)
			}
		})
	}
}

// Read returns middleware that admits requests carrying a token that may
// read (read-only or read-write), as a bearer token or as the password of
// HTTP Basic credentials, and answers 401 otherwise with a Basic challenge,
// so that a browser asks for the token (403 for a charge-only token). The
// dashboard uses it.
func (t *Tokens) Read() func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, ok := t.admit(w, r, needRead, `Basic realm="sluice admin", charset="UTF-8"`); ok {
				next.ServeHTTP(w, r)
			}
		})
	}
}
