package redis

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// ParseURL parses a Redis URL into Options (URL, and Prefix and Timeout when
// the URL carries them as query parameters). The forms are:
//
//	redis://[user:password@]host:port[/db][?addr=host:port&…]
//	rediss://…                       the same over TLS
//	unix:///path/to/redis.sock[?db=N]
//	redis-sentinel://[user:password@]host:port[,host:port…]/master[?…]
//	redis-cluster://[user:password@]host:port[,host:port…][?…]
//
// A redis:// URL names a single node or any node(s) of a Redis Cluster: the
// store asks the server and uses cluster mode when it is one. Extra seed
// nodes may be given as addr parameters. A Sentinel URL lists the sentinels
// and names the master set in the path (redis://…?master_set=name works too).
//
// Query parameters understood besides the client's (addr, db, dial_timeout,
// write_timeout, client_name, master_set, skip_verify, protocol):
// prefix (Options.Prefix) and timeout (Options.Timeout, a Go duration).
func ParseURL(raw string) (Options, error) {
	var o Options
	u, err := url.Parse(raw)
	if err != nil {
		return o, fmt.Errorf("redis: parse URL: %w", redactErr(err))
	}
	q := u.Query()
	if q.Has("prefix") {
		o.Prefix = q.Get("prefix")
		q.Del("prefix")
	}
	if q.Has("timeout") {
		d, err := time.ParseDuration(q.Get("timeout"))
		if err != nil || d <= 0 {
			return o, fmt.Errorf("redis: URL parameter timeout=%q: want a positive duration such as 1s", q.Get("timeout"))
		}
		o.Timeout = d
		q.Del("timeout")
	}
	u.RawQuery = q.Encode()
	o.URL = u.String()
	if _, err := clientOption(o.URL); err != nil {
		return Options{}, err
	}
	return o, nil
}

// redactErr drops the URL (which may hold a password) from a url.Error.
func redactErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// clientOption turns a URL into the client's options.
func clientOption(raw string) (rueidis.ClientOption, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return rueidis.ClientOption{}, fmt.Errorf("redis: URL %q has no scheme (want redis://, rediss://, unix://, redis-sentinel:// or redis-cluster://)", redact(raw))
	}
	switch strings.ToLower(scheme) {
	case "redis", "rediss", "unix":
		opt, err := rueidis.ParseURL(raw)
		if err != nil {
			return opt, fmt.Errorf("redis: URL %q: %w", redact(raw), redactErr(err))
		}
		return opt, nil
	case "redis-sentinel", "redis-cluster":
	default:
		return rueidis.ClientOption{}, fmt.Errorf("redis: URL scheme %q not supported (want redis, rediss, unix, redis-sentinel or redis-cluster)", scheme)
	}
	// host list: [user:pass@]h1:p1,h2:p2[/path][?query]
	var query string
	rest, query, _ = strings.Cut(rest, "?")
	var path string
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		rest, path = rest[:i], rest[i+1:]
	}
	var user string
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		user, rest = rest[:i+1], rest[i+1:]
	}
	hosts := strings.Split(rest, ",")
	if rest == "" || len(hosts) == 0 {
		return rueidis.ClientOption{}, fmt.Errorf("redis: URL %q names no host", redact(raw))
	}
	v, err := url.ParseQuery(query)
	if err != nil {
		return rueidis.ClientOption{}, fmt.Errorf("redis: URL %q: query: %w", redact(raw), err)
	}
	for _, h := range hosts[1:] {
		if h == "" {
			return rueidis.ClientOption{}, fmt.Errorf("redis: URL %q has an empty host in its list", redact(raw))
		}
		v.Add("addr", h)
	}
	if strings.EqualFold(scheme, "redis-sentinel") {
		if path == "" || strings.Contains(path, "/") {
			return rueidis.ClientOption{}, fmt.Errorf("redis: sentinel URL %q must name the master set as its path (redis-sentinel://host:26379/mymaster)", redact(raw))
		}
		v.Set("master_set", path)
	} else if path != "" {
		return rueidis.ClientOption{}, fmt.Errorf("redis: cluster URL %q must not have a path (a cluster has only database 0)", redact(raw))
	}
	opt, err := rueidis.ParseURL("redis://" + user + hosts[0] + "?" + v.Encode())
	if err != nil {
		return opt, fmt.Errorf("redis: URL %q: %w", redact(raw), redactErr(err))
	}
	return opt, nil
}

// redact hides a password in a URL for error messages.
func redact(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	at := strings.LastIndexByte(rest, '@')
	if at < 0 {
		return raw
	}
	user, _, _ := strings.Cut(rest[:at], ":")
	return scheme + "://" + user + ":xxxxx" + rest[at:]
}
