// Package xds takes the rule set from an xDS management server instead of a
// directory, as envoyproxy/ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW does: a
// Client subscribes, state of the world over the aggregated discovery
// service (ADS), to resources of type
// type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig, renders
// each one as the equivalent rule file and compiles the set with the rules
// package, so validation and errors are those of rule files. A set that
// compiles replaces the rules in force at once and is ACKed; one that does
// not is NACKed with the problems as error_detail, and the last good rules
// stay. A server that sends the rejected resources again is answered only
// after a backoff (NACK backoff, on Client), so a bad set costs a few
// requests a minute rather than a loop.
package xds

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/rules"
)

// TypeURL is the xDS type of the resources a Client subscribes to.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// Bounds on what a management server may send.
const (
	// MaxMessageBytes bounds one DiscoveryResponse.
	MaxMessageBytes = 16 << 20
	// MaxResources bounds the RateLimitConfig resources of one response.
	MaxResources = 10000
	// MaxDepth bounds the nesting of descriptors.
	MaxDepth = 32
	// maxDetail bounds the error_detail message of a NACK.
	maxDetail = 4096
)

// Client is an xDS client holding the rules most recently received and
// compiled. Build it with New, start it with Run; Current is safe for
// concurrent use and returns nil until the first good set has arrived. Set
// the exported fields before Run.
type Client struct {
	// DialOptions are added to the dial (default: plaintext; pass TLS
	// credentials here).
	DialOptions []grpc.DialOption
	// MinBackoff and MaxBackoff bound the wait before reconnecting after the
	// stream breaks; it doubles from MinBackoff up to MaxBackoff and starts
	// again after a response arrives. Zero: 100ms and 30s.
	MinBackoff, MaxBackoff time.Duration
	// NACKMinBackoff and NACKMaxBackoff bound the wait before asking again
	// when the server sends resources already rejected (in SotW a NACK is
	// also the request for what comes next, and a server such as
	// go-control-plane's snapshot cache answers it at once with the same
	// resources). The first response carrying a set is judged and answered
	// at once, whatever its version; a repeat of the set last rejected
	// (the same resources, whatever its version_info) is NACKed again only
	// after a wait drawn from [d/2, d], d doubling from NACKMinBackoff up to
	// NACKMaxBackoff over consecutive repeats and starting again after an
	// ACK. Zero: 1s and 1m.
	NACKMinBackoff, NACKMaxBackoff time.Duration
	// After, if set, replaces time.After for every wait of the client
	// (reconnect and NACK backoff), so a test can run them on its own
	// clock.
	After func(d time.Duration) <-chan time.Time
	// OnUpdate, if set, is called after every response the client judges
	// with the version received and nil (applied and ACKed) or the reason it
	// was NACKed; not for a repeat of the set last rejected, which is
	// answered with the same NACK without being judged again.
	OnUpdate func(version string, err error)

	addr, node string
	opts       rules.Options
	log        *slog.Logger

	cur     atomic.Pointer[rules.Snapshot]
	mu      sync.Mutex
	version string    // version of the rules in force
	applied time.Time // when they were applied
	lastErr error     // nil, or why the last response was NACKed

	// Touched by Run's goroutine only.
	rejected  *rejection    // the set last NACKed; nil after an ACK
	nackDelay time.Duration // the next NACK backoff; 0: NACKMinBackoff
}

// rejection is a set the client NACKed: its digest, the version_info it
// came with, and what was wrong with it.
type rejection struct {
	digest  [sha256.Size]byte
	version string
	cause   error
}

// New returns a client of the management server at addr (host:port) that
// identifies itself as node (the xDS node ID the server keys snapshots on).
// opts are those of rule files. log may be nil.
func New(addr, node string, opts rules.Options, log *slog.Logger) (*Client, error) {
	if addr == "" {
		return nil, errors.New("xds: no management server address")
	}
	if node == "" {
		return nil, errors.New("xds: no node ID")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Client{addr: addr, node: node, opts: opts, log: log}, nil
}

// Current returns the rules in force, nil before the first good set.
func (c *Client) Current() *rules.Snapshot { return c.cur.Load() }

// Version returns the version_info of the rules in force ("" before any).
func (c *Client) Version() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.version
}

// LastReload returns when the rules in force were applied (zero before
// any).
func (c *Client) LastReload() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.applied
}

// LastError returns why the last response was NACKed, or nil when it was
// applied.
func (c *Client) LastError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastErr
}

// Run subscribes until ctx is done, reconnecting with backoff whenever the
// stream breaks; it returns nil once ctx is done, or an error when the
// address cannot be used at all.
func (c *Client) Run(ctx context.Context) error {
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes)),
	}, c.DialOptions...)
	conn, err := grpc.NewClient(c.addr, opts...)
	if err != nil {
		return fmt.Errorf("xds: %w", err)
	}
	defer conn.Close()
	ads := discovery.NewAggregatedDiscoveryServiceClient(conn)
	minB, maxB := c.MinBackoff, c.MaxBackoff
	if minB <= 0 {
		minB = 100 * time.Millisecond
	}
	if maxB < minB {
		maxB = max(30*time.Second, minB)
	}
	backoff := minB
	for {
		got, err := c.stream(ctx, ads)
		if ctx.Err() != nil {
			return nil
		}
		if got {
			backoff = minB
		}
		c.log.Warn("xds stream broke; reconnecting", "server", c.addr, "err", err, "in", backoff)
		if !c.wait(ctx, backoff) {
			return nil
		}
		backoff = min(2*backoff, maxB)
	}
}

// stream runs one ADS stream until it breaks; got reports whether any
// response arrived.
func (c *Client) stream(ctx context.Context, ads discovery.AggregatedDiscoveryServiceClient) (got bool, _ error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := ads.StreamAggregatedResources(ctx)
	if err != nil {
		return false, err
	}
	// A new stream resumes from the version in force, so the server need
	// not resend what is already applied (it may anyway).
	req := &discovery.DiscoveryRequest{Node: &core.Node{Id: c.node}, TypeUrl: TypeURL, VersionInfo: c.Version()}
	if err := st.Send(req); err != nil {
		return false, err
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			return got, err
		}
		got = true
		ack, ok := c.answer(ctx, resp)
		if !ok {
			return got, ctx.Err()
		}
		if err := st.Send(ack); err != nil {
			return got, err
		}
	}
}

// answer judges resp and returns the ACK or NACK to send. A repeat of the
// set last rejected is not judged again: its NACK is returned after the
// NACK backoff; ok is false when ctx ended during that wait.
func (c *Client) answer(ctx context.Context, resp *discovery.DiscoveryResponse) (_ *discovery.DiscoveryRequest, ok bool) {
	ack := &discovery.DiscoveryRequest{Node: &core.Node{Id: c.node}, TypeUrl: TypeURL, ResponseNonce: resp.GetNonce()}
	version := resp.GetVersionInfo()
	d := digest(resp)
	if r := c.rejected; r != nil && r.digest == d {
		wait := c.nextNACKDelay()
		c.log.Debug("xds rules rejected before sent again; waiting before asking again", "version", version, "rejected_version", r.version, "in", wait)
		if !c.wait(ctx, wait) {
			return nil, false
		}
		c.nack(ack, fmt.Errorf("version %q: %w", version, r.cause))
		return ack, true
	}
	var cause error
	if resp.GetTypeUrl() != TypeURL {
		cause = fmt.Errorf("unexpected type %q", resp.GetTypeUrl())
	} else {
		cause = c.apply(resp)
	}
	var err error
	if cause != nil {
		err = fmt.Errorf("version %q: %w", version, cause)
		c.nack(ack, err)
		c.rejected = &rejection{digest: d, version: version, cause: cause}
		c.log.Error("xds rules rejected; keeping the last good rules (a repeat of this set is NACKed again after a backoff, and not logged)", "version", version, "err", err)
	} else {
		ack.VersionInfo = version
		c.rejected, c.nackDelay = nil, 0
		c.log.Info("xds rules applied", "version", version, "resources", len(resp.GetResources()))
	}
	if c.OnUpdate != nil {
		c.OnUpdate(version, err)
	}
	return ack, true
}

// nack makes ack a NACK of err (the version in force, err as error_detail,
// cut at maxDetail) and records err as LastError.
func (c *Client) nack(ack *discovery.DiscoveryRequest, err error) {
	msg := err.Error()
	if len(msg) > maxDetail {
		msg = msg[:maxDetail] + "…"
	}
	c.mu.Lock()
	c.lastErr = err
	ack.VersionInfo = c.version
	c.mu.Unlock()
	ack.ErrorDetail = status.New(codes.InvalidArgument, msg).Proto()
}

// nextNACKDelay returns the wait before the next repeat NACK, drawn from
// [d/2, d], and doubles d up to NACKMaxBackoff.
func (c *Client) nextNACKDelay() time.Duration {
	minB, maxB := c.NACKMinBackoff, c.NACKMaxBackoff
	if minB <= 0 {
		minB = time.Second
	}
	if maxB < minB {
		maxB = max(time.Minute, minB)
	}
	d := max(c.nackDelay, minB)
	c.nackDelay = min(2*d, maxB)
	return d/2 + rand.N(d/2+1)
}

// wait waits d on c.After (or time.After); false when ctx ended first.
func (c *Client) wait(ctx context.Context, d time.Duration) bool {
	var ch <-chan time.Time
	if c.After != nil {
		ch = c.After(d)
	} else {
		t := time.NewTimer(d)
		defer t.Stop()
		ch = t.C
	}
	select {
	case <-ctx.Done():
		return false
	case <-ch:
		return true
	}
}

// digest identifies the set resp carries, apart from its version_info and
// nonce: a SHA-256 over its type and its resources' types and bytes, in
// no particular order (go-control-plane's snapshot cache sends them in
// map order, so one set can arrive in several orders).
func digest(resp *discovery.DiscoveryResponse) [sha256.Size]byte {
	sums := make([][sha256.Size]byte, len(resp.GetResources()))
	for i, r := range resp.GetResources() {
		h := sha256.New()
		writeField(h, []byte(r.GetTypeUrl()))
		writeField(h, r.GetValue())
		h.Sum(sums[i][:0])
	}
	slices.SortFunc(sums, func(a, b [sha256.Size]byte) int { return bytes.Compare(a[:], b[:]) })
	h := sha256.New()
	writeField(h, []byte(resp.GetTypeUrl()))
	for _, s := range sums {
		h.Write(s[:])
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// writeField writes b length-prefixed, so that fields cannot run into each
// other.
func writeField(h hash.Hash, b []byte) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(b)))
	h.Write(n[:])
	h.Write(b)
}

// apply compiles resp's resources and, if they compile, makes them the
// rules in force; it returns why not otherwise.
func (c *Client) apply(resp *discovery.DiscoveryResponse) error {
	snap, err := Compile(resp.GetResources(), c.opts)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cur.Store(snap)
	c.version, c.lastErr, c.applied = resp.GetVersionInfo(), nil, time.Now()
	return nil
}

// Compile turns RateLimitConfig resources into a snapshot: each becomes the
// rule file "xds:NAME" (problems read "xds:NAME:line: field: msg", the line
// being that of the rendering, Render). An empty set is an error, as an
// empty rule directory is.
func Compile[A interface {
	GetTypeUrl() string
	GetValue() []byte
}](resources []A, opts rules.Options) (*rules.Snapshot, error) {
	if len(resources) > MaxResources {
		return nil, fmt.Errorf("%d resources, more than %d", len(resources), MaxResources)
	}
	files := make([]rules.File, 0, len(resources))
	total := 0
	for i, r := range resources {
		if r.GetTypeUrl() != TypeURL {
			return nil, fmt.Errorf("resources[%d]: type %q, want %s", i, r.GetTypeUrl(), TypeURL)
		}
		var cfg rlconf.RateLimitConfig
		if err := unmarshal(r.GetValue(), &cfg); err != nil {
			return nil, fmt.Errorf("resources[%d]: %w", i, err)
		}
		data, err := Render(&cfg)
		if err != nil {
			return nil, fmt.Errorf("resources[%d] (%s): %w", i, cfg.GetName(), err)
		}
		name := cfg.GetName()
		if name == "" {
			name = fmt.Sprintf("resources[%d]", i)
		}
		if total += len(data); total > rules.MaxDirBytes {
			return nil, fmt.Errorf("resources[%d] (%s): the rule files rendered come to more than %d bytes (rules.MaxDirBytes)", i, name, rules.MaxDirBytes)
		}
		files = append(files, rules.File{Name: "xds:" + name, Data: data})
	}
	return rules.ParseFiles(files, opts)
}

// Render returns cfg as the equivalent rule file (the name is not part of
// it). A unit of UNKNOWN renders as "unknown", which the rules reject,
// unless the limit is unlimited.
//
// It writes the YAML itself, block style with every string double-quoted
// (strconv.Quote's escapes are YAML's), in one pass: the YAML library's
// encoder keeps every event of a document until its end, some 25 KB per
// descriptor. A configuration nested deeper than MaxDepth, or whose
// rendering would be longer than rules.MaxFileBytes (which rules.ParseFiles
// refuses), is refused as soon as that is known.
func Render(cfg *rlconf.RateLimitConfig) ([]byte, error) {
	b := append([]byte("domain: "), strconv.Quote(cfg.GetDomain())...)
	b = append(b, '\n')
	if len(cfg.GetDescriptors()) == 0 {
		return b, nil
	}
	b = append(b, "descriptors:\n"...)
	return appendDescriptors(b, cfg.GetDescriptors(), 1)
}

// appendDescriptors appends ds, at depth (1: the top), to b.
func appendDescriptors(b []byte, ds []*rlconf.RateLimitDescriptor, depth int) ([]byte, error) {
	if depth > MaxDepth {
		return nil, fmt.Errorf("descriptors nested deeper than %d", MaxDepth)
	}
	indent := 2 * (depth - 1)
	line := func(b []byte, extra int, s string) []byte {
		for range indent + extra {
			b = append(b, ' ')
		}
		return append(b, s...)
	}
	for _, d := range ds {
		b = line(b, 0, "- key: ")
		b = append(strconv.AppendQuote(b, d.GetKey()), '\n')
		if d.GetValue() != "" {
			b = line(b, 2, "value: ")
			b = append(strconv.AppendQuote(b, d.GetValue()), '\n')
		}
		if d.GetShadowMode() {
			b = line(b, 2, "shadow_mode: true\n")
		}
		if d.GetDetailedMetric() {
			b = line(b, 2, "detailed_metric: true\n")
		}
		if rl := d.GetRateLimit(); rl != nil {
			b = line(b, 2, "rate_limit:\n")
			if !rl.GetUnlimited() || rl.GetUnit() != rlconf.RateLimitUnit_UNKNOWN {
				b = line(b, 4, "unit: ")
				b = append(strconv.AppendQuote(b, strings.ToLower(rl.GetUnit().String())), '\n')
			}
			if rl.GetUnlimited() {
				b = line(b, 4, "unlimited: true\n")
			} else {
				b = line(b, 4, "requests_per_unit: ")
				b = append(strconv.AppendUint(b, uint64(rl.GetRequestsPerUnit()), 10), '\n')
			}
			if rl.GetName() != "" {
				b = line(b, 4, "name: ")
				b = append(strconv.AppendQuote(b, rl.GetName()), '\n')
			}
			if len(rl.GetReplaces()) > 0 {
				b = line(b, 4, "replaces:\n")
				for _, r := range rl.GetReplaces() {
					b = line(b, 4, "- name: ")
					b = append(strconv.AppendQuote(b, r.GetName()), '\n')
					if len(b) > rules.MaxFileBytes {
						return nil, errTooLong
					}
				}
			}
		}
		if len(b) > rules.MaxFileBytes {
			return nil, errTooLong
		}
		if len(d.GetDescriptors()) > 0 {
			b = line(b, 2, "descriptors:\n")
			var err error
			if b, err = appendDescriptors(b, d.GetDescriptors(), depth+1); err != nil {
				return nil, err
			}
		}
	}
	return b, nil
}

// errTooLong refuses a configuration that renders to more than a rule file
// may hold.
var errTooLong = fmt.Errorf("renders to more than %d bytes, the limit of one rule file (rules.MaxFileBytes)", rules.MaxFileBytes)
