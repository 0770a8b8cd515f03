package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/server/api"
)

func init() {
	register("check", "ask a running server: sluice check --domain D key=value [key=value…] [-d k=v,k2=v2]…", runCheck)
}

// checkArgs are the parsed arguments of `sluice check`.
type checkArgs struct {
	addr    string
	domain  string
	hits    uint64
	hitsSet bool
	timeout time.Duration
	entries []*ratelimitv3.RateLimitDescriptor_Entry
	// descs are the --descriptor flags, each a descriptor of its own;
	// the key=value arguments (entries) make one more, first.
	descs  [][]*ratelimitv3.RateLimitDescriptor_Entry
	url    string // --url: ask the HTTP API (reasons, degraded modes) instead of gRPC
	output string
	tls    clientTLSConfig
}

// parseDescriptor parses "k=v,k2=v2" into entries.
func parseDescriptor(s string) ([]*ratelimitv3.RateLimitDescriptor_Entry, error) {
	var out []*ratelimitv3.RateLimitDescriptor_Entry
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q: want key=value[,key=value…] with non-empty keys", s)
		}
		out = append(out, &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return out, nil
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
	descFlag := func(s string) error {
		d, err := parseDescriptor(s)
		if err != nil {
			return err
		}
		c.descs = append(c.descs, d)
		return nil
	}
	fs.Func("descriptor", "a descriptor k=v[,k2=v2…] (repeatable: several descriptors in one request, as Envoy sends)", descFlag)
	fs.Func("d", "short for --descriptor", descFlag)
	fs.StringVar(&c.url, "url", "", "ask the HTTP API at this base URL (http://127.0.0.1:8080) instead of gRPC: the answer then names each status's reason and degraded mode (env SLUICE_CHECK_URL)")
	fs.StringVar(&c.output, "output", "table", "table or json (json: the server's answer as it came, or the gRPC response as JSON)")
	c.tls.flags(fs, "", "the server")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: sluice check [--addr host:port | --url http://host:port] --domain D [--hits N] [key=value…] [-d k=v,k2=v2]… [--output table|json]")
		fmt.Fprintln(stderr, "\nSends one request: the key=value arguments, in order, make its first descriptor, and each")
		fmt.Fprintln(stderr, "--descriptor (-d) one more. Prints the decision of each descriptor: code, limit, remaining,")
		fmt.Fprintln(stderr, "and why it was refused (reason) and how a failing store was handled (degraded) — those two")
		fmt.Fprintln(stderr, "travel only over the HTTP API: give --url (or SLUICE_CHECK_URL) to see them.")
		fmt.Fprintln(stderr, "Exit status 0 whatever the decision; 1 if the server could not be asked.")
		fmt.Fprintln(stderr, "\nFlags:")
		fs.PrintDefaults()
	}
	addrSet, urlSet := false, false
	for {
		if err := parseArgs(fs, args); err != nil {
			return c, err
		}
		fs.Visit(func(f *flag.Flag) {
			addrSet = addrSet || f.Name == "addr"
			urlSet = urlSet || f.Name == "url"
		})
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
	if !urlSet && !addrSet {
		c.url = getenv("SLUICE_CHECK_URL")
	}
	if c.domain == "" {
		return c, fmt.Errorf("check: --domain is required: %w", errUsage)
	}
	if len(c.entries) > 0 {
		c.descs = append([][]*ratelimitv3.RateLimitDescriptor_Entry{c.entries}, c.descs...)
	}
	if len(c.descs) == 0 {
		return c, fmt.Errorf("check: give at least one key=value entry or --descriptor: %w", errUsage)
	}
	if err := checkOutput("check", c.output); err != nil {
		return c, err
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
	if c.url != "" {
		return checkHTTP(ctx, c, stdout)
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
	req := &rlsv3.RateLimitRequest{Domain: c.domain}
	for _, d := range c.descs {
		rd := &ratelimitv3.RateLimitDescriptor{Entries: d}
		if c.hitsSet {
			// hits_addend 0 on the request means 1; the descriptor's own
			// hits_addend can say 0.
			rd.HitsAddend = wrapperspb.UInt64(c.hits)
		}
		req.Descriptors = append(req.Descriptors, rd)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req)
	if err != nil {
		return fmt.Errorf("check: %s: %w", c.addr, err)
	}
	if c.output == "json" {
		b, err := protojson.Marshal(resp)
		if err != nil {
			return fmt.Errorf("check: %w", err)
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
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
	// The chosen alternatives (first with quota), from dynamic_metadata.
	choices := map[string]api.ChoiceJSON{}
	for g, v := range resp.GetDynamicMetadata().GetFields()["sluice.choice"].GetStructValue().GetFields() {
		f := v.GetStructValue().GetFields()
		choices[g] = api.ChoiceJSON{Value: f["value"].GetStringValue(), Key: f["key"].GetStringValue(),
			Index: int(f["index"].GetNumberValue()), Descriptor: int(f["descriptor"].GetNumberValue())}
	}
	printChoices(w, choices)
}

// checkHTTP asks POST /v1/check of the HTTP API at c.url and prints its
// answer: as it came (--output json), or one line per descriptor with the
// reason of a refusal and the degraded mode of a failing store.
func checkHTTP(ctx context.Context, c checkArgs, stdout io.Writer) error {
	req := api.CheckRequest{Domain: c.domain}
	if c.hitsSet {
		req.Hits = &c.hits
	}
	for _, d := range c.descs {
		var es []api.Entry
		for _, e := range d {
			es = append(es, api.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		req.Descriptors = append(req.Descriptors, api.CheckDescriptor{Entries: es})
	}
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	u := strings.TrimSuffix(c.url, "/") + "/v1/check"
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("check: --url %q: %w", c.url, err)
	}
	hr.Header.Set("Content-Type", "application/json")
	tlsConf, err := c.tls.config()
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	client := http.DefaultClient
	if tlsConf != nil {
		client = &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConf}}
	}
	resp, err := client.Do(hr)
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxAdminAnswer))
	if err != nil {
		return fmt.Errorf("check: %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("check: %s: %s: %s", u, resp.Status, bytes.TrimSpace(answer))
	}
	if c.output == "json" {
		_, err := stdout.Write(answer)
		return err
	}
	var cr api.CheckResponse
	if err := decodeAnswer(answer, &cr); err != nil {
		return fmt.Errorf("check: the answer is not what this version expects: %w", err)
	}
	printCheckResponse(stdout, &cr)
	return nil
}

// printCheckResponse prints the HTTP API's answer as printDecision prints
// the gRPC one, with each status's reason and degraded mode.
func printCheckResponse(w io.Writer, cr *api.CheckResponse) {
	fmt.Fprint(w, cr.Code)
	if cr.Reason != "" {
		fmt.Fprintf(w, "  reason %s", cr.Reason)
	}
	fmt.Fprintln(w)
	for i, s := range cr.Statuses {
		fmt.Fprintf(w, "  descriptor %d: %s", i, s.Code)
		switch {
		case s.Limit != nil:
			if s.Rule != "" {
				fmt.Fprintf(w, "  rule %s", s.Rule)
			}
			fmt.Fprintf(w, "  limit %d per %s", s.Limit.RequestsPerUnit, s.Limit.Unit)
			if s.Degraded != "failed_open" && s.Degraded != "failed_closed" {
				fmt.Fprintf(w, "  remaining %d  reset in %v", s.Remaining, time.Duration(s.ResetAfterMs)*time.Millisecond)
			}
			if s.RetryAfterMs > 0 {
				fmt.Fprintf(w, "  retry in %v", time.Duration(s.RetryAfterMs)*time.Millisecond)
			}
		case s.Unlimited:
			fmt.Fprint(w, "  unlimited")
		case s.Reason == "":
			fmt.Fprint(w, "  no rule matched")
		}
		if s.Reason != "" {
			fmt.Fprintf(w, "  reason %s", s.Reason)
		}
		if s.Degraded != "" {
			fmt.Fprintf(w, "  degraded %s", s.Degraded)
		}
		if s.Shadowed {
			fmt.Fprint(w, "  shadowed (would deny)")
		}
		if s.PassedOver {
			fmt.Fprint(w, "  passed over (another alternative decides)")
		}
		if s.Untried {
			fmt.Fprint(w, "  untried alternative")
		}
		fmt.Fprintln(w)
	}
	printChoices(w, cr.Choice)
}

// printChoices prints, per choice group (first with quota), the
// alternative the request was admitted with.
func printChoices(w io.Writer, choices map[string]api.ChoiceJSON) {
	groups := make([]string, 0, len(choices))
	for g := range choices {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	for _, g := range groups {
		c := choices[g]
		fmt.Fprintf(w, "  chosen %s: %s=%s (alternative %d, descriptor %d)\n", g, c.Key, c.Value, c.Index, c.Descriptor)
	}
}
