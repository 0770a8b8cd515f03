package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
)

// Secrets — the Redis URL's password — must never reach a log line, an
// error message, /metrics or /debug/*. `sluice serve` takes three measures:
// the URL can come from SLUICE_REDIS_URL or --redis-url-file instead of the
// command line (which every local user can read in /proc); the debug
// listener does not serve /debug/pprof/cmdline; and every log attribute and
// the error `serve` returns are scrubbed of the secret strings, in case a
// dependency quotes the URL.

// loadSecrets reads --redis-url-file, if given, into the Redis URL, and
// --notify-secret-file.
func (c *serveConfig) loadSecrets() error {
	if err := c.Notify.load(); err != nil {
		return err
	}
	if c.Store.Redis.URLFile == "" {
		return nil
	}
	b, err := os.ReadFile(c.Store.Redis.URLFile)
	if err != nil {
		return fmt.Errorf("--redis-url-file: %w", err)
	}
	u := strings.TrimSpace(string(b))
	if u == "" {
		return fmt.Errorf("--redis-url-file: %s is empty", c.Store.Redis.URLFile)
	}
	c.Store.Redis.URL = u
	return nil
}

// secrets returns the strings that must not be shown: the password of the
// Redis URL (or its whole user info when it has no password part, as in
// redis://token@host), the PostgreSQL URL's, and the webhook's key and
// URL's (notifyConfig.secrets).
func (c serveConfig) secrets() []string {
	return append(append(urlSecrets(c.Store.Redis.URL), urlSecrets(c.Tenants.PostgresURL)...), c.Notify.secrets()...)
}

func urlSecrets(raw string) []string {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return nil
	}
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		rest = rest[:i]
	}
	at := strings.LastIndexByte(rest, '@')
	if at <= 0 {
		return nil
	}
	info := rest[:at]
	if _, pass, ok := strings.Cut(info, ":"); ok {
		info = pass
	}
	if len(info) < 3 { // too short to scrub without mangling everything
		return nil
	}
	out := []string{info}
	// A password with reserved characters appears percent-encoded in the
	// URL and decoded in what a client says about it.
	if dec, err := url.PathUnescape(info); err == nil && dec != info {
		out = append(out, dec)
	}
	return out
}

// scrubber replaces secrets in strings with "xxxxx".
type scrubber struct{ secrets []string }

func (s scrubber) String(v string) string {
	for _, sec := range s.secrets {
		v = strings.ReplaceAll(v, sec, "xxxxx")
	}
	return v
}

func (s scrubber) contains(v string) bool {
	for _, sec := range s.secrets {
		if strings.Contains(v, sec) {
			return true
		}
	}
	return false
}

// attr is a slog ReplaceAttr: it rewrites any attribute, the message
// included, whose text holds a secret.
func (s scrubber) attr(_ []string, a slog.Attr) slog.Attr {
	if len(s.secrets) == 0 {
		return a
	}
	switch a.Value.Kind() {
	case slog.KindString:
		if v := a.Value.String(); s.contains(v) {
			return slog.String(a.Key, s.String(v))
		}
	case slog.KindAny:
		if v := fmt.Sprint(a.Value.Any()); s.contains(v) {
			return slog.String(a.Key, s.String(v))
		}
	}
	return a
}

// err returns err with its secrets scrubbed, keeping errUsage visible to
// errors.Is so the exit status stays right.
func (s scrubber) err(err error) error {
	if err == nil || !s.contains(err.Error()) {
		return err
	}
	msg := s.String(err.Error())
	if errors.Is(err, errUsage) {
		return &scrubbedErr{msg: msg, is: errUsage}
	}
	return &scrubbedErr{msg: msg}
}

type scrubbedErr struct {
	msg string
	is  error
}

func (e *scrubbedErr) Error() string { return e.msg }
func (e *scrubbedErr) Unwrap() error { return e.is }
