package main

import (
	"bytes"
	"context"
	stdjson "encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	json "github.com/go-json-experiment/json"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The bare servers the transport goals of issue 29 are measured against
// (scripts/instr-transport.sh): each decodes the request sluice serve
// decodes and answers what sluice serve answers the bench rules
// (testdata/rules/bench: 1000 per second, every request allowed), with no
// rate limiting behind it.

// bareMaxBytes is sluice serve's default bound on a body or a gRPC message
// (--max-request-bytes).
const bareMaxBytes = 256 << 10

// bareRLS answers ShouldRateLimit as sluice serve answers the bench rules:
// OK, one status per descriptor with the limit, the remaining count and the
// time to reset. Its request is decoded by grpc-go's proto codec.
type bareRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (bareRLS) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if req.GetDomain() == "" || len(req.GetDescriptors()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "domain and descriptors required")
	}
	out := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.GetDescriptors()))}
	for i := range out.Statuses {
		out.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{
			Code:               rlsv3.RateLimitResponse_OK,
			CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 1000, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND},
			LimitRemaining:     999,
			DurationUntilReset: durationpb.New(300 * time.Millisecond),
		}
	}
	return out, nil
}

// bareCheckRequest is server/api's CheckRequest, field for field.
type bareCheckRequest struct {
	Domain      string `json:"domain"`
	Descriptors []struct {
		Entries []struct {
			Key   string `json:"key"`
			Value string `json:"value"`
		} `json:"entries"`
		Hits  *uint64 `json:"hits,omitempty"`
		Limit *struct {
			RequestsPerUnit uint32 `json:"requests_per_unit"`
			Unit            string `json:"unit"`
		} `json:"limit,omitempty"`
	} `json:"descriptors"`
	Hits *uint64 `json:"hits,omitempty"`
}

// bareCheckResponse is server/api's CheckResponse as sluice serve fills it
// for the bench rules.
type bareCheckResponse struct {
	Allowed  bool              `json:"allowed"`
	Code     string            `json:"code"`
	Statuses []bareCheckStatus `json:"statuses"`
}

type bareCheckStatus struct {
	Code  string `json:"code"`
	Rule  string `json:"rule,omitempty"`
	Limit *struct {
		RequestsPerUnit uint32 `json:"requests_per_unit"`
		Unit            string `json:"unit,omitempty"`
		WindowMs        int64  `json:"window_ms"`
		Algorithm       string `json:"algorithm,omitempty"`
	} `json:"limit,omitempty"`
	Remaining    int64 `json:"remaining"`
	ResetAfterMs int64 `json:"reset_after_ms"`
}

// bareCheck is a bare net/http handler of POST /v1/check: it reads the
// body (bounded as sluice serve bounds it), decodes it strictly (unknown
// members refused) with encoding/json (lib "std") or go-json-experiment/json
// (lib "v2", the library under server/api's decoder), checks the domain and
// descriptors, and writes the JSON answer sluice serve writes for the bench
// rules with the same headers.
func bareCheck(lib string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, bareMaxBytes))
		if err != nil {
			http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		var req bareCheckRequest
		if lib == "v2" {
			err = json.Unmarshal(b, &req, json.RejectUnknownMembers(true))
		} else {
			dec := stdjson.NewDecoder(bytes.NewReader(b))
			dec.DisallowUnknownFields()
			err = dec.Decode(&req)
		}
		if err == nil && (req.Domain == "" || len(req.Descriptors) == 0) {
			err = errors.New("domain and descriptors required")
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out := bareCheckResponse{Allowed: true, Code: "OK", Statuses: make([]bareCheckStatus, len(req.Descriptors))}
		for i, d := range req.Descriptors {
			st := &out.Statuses[i]
			st.Code, st.Rule, st.Remaining, st.ResetAfterMs = "OK", d.Entries[0].Key, 999, 300
			st.Limit = &struct {
				RequestsPerUnit uint32 `json:"requests_per_unit"`
				Unit            string `json:"unit,omitempty"`
				WindowMs        int64  `json:"window_ms"`
				Algorithm       string `json:"algorithm,omitempty"`
			}{1000, "second", 1000, "fixed_window"}
		}
		var body []byte
		if lib == "v2" {
			body, err = json.Marshal(out)
		} else {
			body, err = stdjson.Marshal(out)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(append(body, '\n'))
	}
}

// runBaselineHTTP serves bareCheck on POST /v1/check.
func runBaselineHTTP(ctx context.Context, args []string, _ env, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("baseline-http", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8092", "listen address")
	lib := fs.String("json", "std", "JSON library: std (encoding/json) or v2 (go-json-experiment/json)")
	if done, err := parseFlags(fs, args); done || err != nil {
		return err
	}
	if *lib != "std" && *lib != "v2" {
		return fmt.Errorf("baseline-http: --json std or v2: %w", errUsage)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("baseline-http: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/check", bareCheck(*lib))
	// sluice serve's settings (cmd/sluice/serve.go): each timeout sets a
	// deadline on the connection per request.
	srv := &http.Server{Handler: mux, MaxHeaderBytes: 64 << 10, ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("baseline-http: %w", err)
	}
	return nil
}

// runBenchHTTP drives POST /v1/check with a fixed count of requests (as
// grpc --requests): one descriptor, --keys values round robin, each caller
// on its own keep-alive connection.
func runBenchHTTP(ctx context.Context, args []string, _ env, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("http", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "HTTP address to drive")
	domain := fs.String("domain", "bench", "rule domain of the requests")
	key := fs.String("key", "remote_address", "descriptor key of the requests")
	keys := fs.Int("keys", 10_000, "distinct descriptor values, used round robin")
	callers := fs.Int("concurrency", 50, "concurrent callers, each on its own connection")
	var cs countSpec
	fs.IntVar(&cs.requests, "requests", 20_000, "measured requests")
	fs.IntVar(&cs.warmup, "warmup-requests", 2000, "unmeasured requests first")
	fs.StringVar(&cs.before, "before", "", "shell command run after the warm-up, before the measured requests, none in flight")
	fs.StringVar(&cs.after, "after", "", "shell command run after the measured requests, none in flight")
	fs.DurationVar(&cs.wait, "wait", 15*time.Second, "how long the server may take to answer the first request")
	if done, err := parseFlags(fs, args); done || err != nil {
		return err
	}
	if *keys < 1 || *callers < 1 || cs.requests < 1 || cs.warmup < 0 {
		return fmt.Errorf("http: --keys, --concurrency and --requests must be positive, --warmup-requests not negative: %w", errUsage)
	}
	bodies := make([][]byte, *keys)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, `{"domain":%s,"descriptors":[{"entries":[{"key":%s,"value":"10.%d.%d.%d"}]}]}`,
			strconv.Quote(*domain), strconv.Quote(*key), i>>16&255, i>>8&255, i&255)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *callers, MaxConnsPerHost: *callers}, Timeout: time.Minute}
	defer client.CloseIdleConnections()
	url := "http://" + *addr + "/v1/check"
	call := func(ctx context.Context, _, i int) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(bodies[i%len(bodies)]))
		if err != nil {
			return false, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		if err != nil {
			return false, err
		}
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Errorf("status %d: %s", resp.StatusCode, out)
		}
		return !bytes.Contains(out, []byte(`"allowed":true`)), nil
	}
	deadline := time.Now().Add(cs.wait)
	for {
		_, err := call(ctx, 0, 0)
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("http: %s not answering after %v: %w", url, cs.wait, err)
		}
		sleep(ctx, 100*time.Millisecond)
	}
	return countCalls(ctx, *callers, *callers, call, cs, stdout)
}
