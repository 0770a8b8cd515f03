package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func init() {
	register("check", "ask a running server: sluice check --domain D key=value [key=value…]", runCheck)
}

// checkArgs are the parsed arguments of `sluice check`.
type checkArgs struct {
	addr    string
	domain  string
	hits    uint64
	hitsSet bool
	timeout time.Duration
	entries []*ratelimitv3.RateLimitDescriptor_Entry
	tls     clientTLSConfig
}

// parseCheckArgs parses flags and key=value entries in any order (flags may
// follow entries). SLUICE_CHECK_ADDR sets --addr when the flag is absent.
func parseCheckArgs(args []string, getenv env, stderr io.Writer) (checkArgs, error) {
	var c checkArgs
	fs := newFlagSet("check", stderr)
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8081", "gRPC address of the server (env SLUICE_CHECK_ADDR)")
	fs.StringVar(&c.domain, "domain", "", "rule domain (required)")
	fs.Func("hits", "hits to charge (hits_addend); 0 checks without charging; default 1", func(s string) error {
		var n uint64
		if _, err := fmt.Sscan(s, &n); err != nil || fmt.Sprint(n) != s {
			return fmt.Errorf("%q is not a non-negative integer", s)
		}
		c.hits, c.hitsSet = n, true
		return nil
	})
	fs.DurationVar(&c.timeout, "timeout", 5*time.Second, "how long to wait for the answer")
	c.tls.flags(fs, "", "the server")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: sluice check [--addr host:port] --domain D [--hits N] key=value [key=value…]")
		fmt.Fprintln(stderr, "\nSends one RateLimitRequest with one descriptor made of the key=value entries, in order,")
		fmt.Fprintln(stderr, "and prints the decision. Exit status 0 whatever the decision; 1 if the server could not be asked.")
		fmt.Fprintln(stderr, "\nFlags:")
		fs.PrintDefaults()
	}
	addrSet := false
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return c, err
			}
			return c, fmt.Errorf("%w: %w", errUsage, err)
		}
		fs.Visit(func(f *flag.Flag) { addrSet = addrSet || f.Name == "addr" })
		if fs.NArg() == 0 {
			break
		}
		kv := fs.Arg(0)
		args = fs.Args()[1:]
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return c, fmt.Errorf("check: entry %q: want key=value with a non-empty key: %w", kv, errUsage)
		}
		c.entries = append(c.entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	if !addrSet {
		if a := getenv("SLUICE_CHECK_ADDR"); a != "" {
			c.addr = a
		}
	}
	if c.domain == "" {
		return c, fmt.Errorf("check: --domain is required: %w", errUsage)
	}
	if len(c.entries) == 0 {
		return c, fmt.Errorf("check: give at least one key=value entry: %w", errUsage)
	}
	return c, nil
}

func runCheck(ctx context.Context, args []string, getenv env, stdout, stderr io.Writer) error {
	c, err := parseCheckArgs(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	creds, err := c.tls.credentials()
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	conn, err := grpc.NewClient(c.addr, creds)
	if err != nil {
		return fmt.Errorf("check: %s: %w", c.addr, err)
	}
	defer conn.Close()
	req := &rlsv3.RateLimitRequest{
		Domain:      c.domain,
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: c.entries}},
	}
	if c.hitsSet {
		// hits_addend 0 on the request means 1; the descriptor's own
		// hits_addend can say 0.
		req.Descriptors[0].HitsAddend = wrapperspb.UInt64(c.hits)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req)
	if err != nil {
		return fmt.Errorf("check: %s: %w", c.addr, err)
	}
	printDecision(stdout, resp)
	return nil
}

// printDecision prints the overall code, then one line per descriptor.
func printDecision(w io.Writer, resp *rlsv3.RateLimitResponse) {
	fmt.Fprintln(w, resp.GetOverallCode())
	for i, s := range resp.GetStatuses() {
		fmt.Fprintf(w, "  descriptor %d: %s", i, s.GetCode())
		switch cl := s.GetCurrentLimit(); {
		case cl != nil:
			per := strings.ToLower(cl.GetUnit().String())
			if m := cl.GetUnitMultiplier(); m != nil && m.GetValue() > 1 {
				per = fmt.Sprintf("%d %ss", m.GetValue(), per)
			}
			name := ""
			if cl.GetName() != "" {
				name = fmt.Sprintf(" (%s)", cl.GetName())
			}
			fmt.Fprintf(w, "  limit %d per %s%s", cl.GetRequestsPerUnit(), per, name)
			if s.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
				// A denial's limit_remaining is envoy's 0 whatever is left
				// (a cost above capacity takes nothing): RateLimit's r,
				// printed below with --response-headers, says.
				fmt.Fprintf(w, "  remaining %d", s.GetLimitRemaining())
			}
			fmt.Fprintf(w, "  reset in %v", s.GetDurationUntilReset().AsDuration())
		case s.GetLimitRemaining() == 4294967295:
			fmt.Fprint(w, "  unlimited")
		default:
			fmt.Fprint(w, "  no rule matched")
		}
		fmt.Fprintln(w)
	}
	for _, h := range resp.GetResponseHeadersToAdd() {
		fmt.Fprintf(w, "  %s: %s\n", h.GetKey(), h.GetValue())
	}
}
