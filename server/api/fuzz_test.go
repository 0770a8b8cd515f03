package api

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/algorithm"
	"github.com/sluice-rl/sluice/service"
)

// checkDecoded asserts what a successful decode promises, and that the real
// engine either decides the request or rejects it as invalid.
func checkDecoded(t *testing.T, e *service.Engine, req service.Request) {
	t.Helper()
	checkDecodedEnvoy(t, e, req, false)
}

// checkDecodedEnvoy is checkDecoded; envoy: the body was envoy's, whose
// descriptors may have no entries or empty keys (answered OK, as
// envoyproxy/ratelimit answers them).
func checkDecodedEnvoy(t *testing.T, e *service.Engine, req service.Request, envoy bool) {
	t.Helper()
	if req.Domain == "" || len(req.Descriptors) == 0 {
		t.Fatalf("decoded a request without domain or descriptors: %+v", req)
	}
	for i, d := range req.Descriptors {
		if envoy {
			break
		}
		if len(d.Entries) == 0 {
			t.Fatalf("descriptor %d decoded without entries", i)
		}
		for j, en := range d.Entries {
			if en.Key == "" {
				t.Fatalf("descriptor %d entry %d decoded with an empty key", i, j)
			}
		}
	}
	resp, err := e.Check(context.Background(), req)
	if err != nil {
		if !errors.Is(err, service.ErrInvalidRequest) {
			t.Fatalf("engine error %v for a decoded request, want nil or ErrInvalidRequest", err)
		}
		return
	}
	if len(resp.Statuses) != len(req.Descriptors) {
		t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(req.Descriptors))
	}
}

var checkSeeds = []string{
	`{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"1.2.3.4"}]}]}`,
	`{"domain":"edge","hits":3,"descriptors":[{"entries":[{"key":"a","value":"1"},{"key":"b"}],"hits":0},{"entries":[{"key":"c"}],"limit":{"requests_per_unit":9,"unit":"minute"}}]}`,
	`{"domain":"edge","descriptors":[{"entries":[{"key":"bucket","value":"x"}],"hits":18446744073709551615}]}`,
	`{"domain":"","descriptors":[]}`,
	`{"domain":"edge","descriptors":[{}]}`,
	`{"domain":"edge","descriptors":[{"entries":[{"key":""}]}]}`,
	`{"domain":5}`, `[]`, `null`, `{"domain":"edge"} x`, `{"domain":"\u0000"}`, ``,
	// Nested past strictjson.MaxDepth, at the top, in a member, in an
	// unknown member (issue 28).
	strings.Repeat("[", 40), strings.Repeat(`{"a":`, 40),
	`{"domain":"edge","descriptors":[{"entries":[{"key":"k","value":` + strings.Repeat("[", 30) + `}]}]}`,
	`{"x":` + strings.Repeat(`{"a":[`, 20) + `1` + strings.Repeat("]}", 20) + `}`,
}

// FuzzDecodeCheckRequest: any body decodes to a valid request or a clear
// error, never a panic.
func FuzzDecodeCheckRequest(f *testing.F) {
	for _, s := range checkSeeds {
		f.Add(s)
	}
	e := newEngine(f, nil)
	f.Fuzz(func(t *testing.T, body string) {
		req, err := DecodeCheckRequest(strings.NewReader(body))
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("empty error message for %q", body)
			}
			return
		}
		checkDecoded(t, e, req)
	})
}

// FuzzDecodeEnvoyJSON: any /json body decodes to a valid request or a clear
// error, never a panic; and decodeEnvoyJSON agrees with protojson alone
// (what /json did before its bounds): it refuses only what protojson and
// the conversion refuse, and decodes the rest to the same request.
func FuzzDecodeEnvoyJSON(f *testing.F) {
	for _, s := range []string{
		`{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"1.2.3.4"}]}]}`,
		`{"domain":"edge","hitsAddend":2,"descriptors":[{"entries":[{"key":"a","value":"1"}],"hitsAddend":"0"}]}`,
		`{"domain":"edge","descriptors":[{"entries":[{"key":"a"}],"limit":{"requestsPerUnit":1,"unit":"MINUTE"}}]}`,
		`{"domain":"edge","descriptors":[{"entries":[{"key":"a"}],"limit":{"requestsPerUnit":1,"unit":"SECOND","unitMultiplier":3}}]}`,
		`{"domain":"edge","descriptors":[{"entries":[{"key":"a"}],"isNegativeHits":true}]}`,
		`{"domain":"edge","descriptors":[{"entries":[]}]}`,
		`{"domain":"edge","descriptors":[{"entries":[{"key":""}]}]}`,
		`{"domain":""}`, `{"nope":1}`, `[]`, ``, `{"domain":"edge","descriptors":[{"entries":[{"key":"a"}],"hitsAddend":"18446744073709551615"}]}`,
		// Bounded before protojson reads them (issue 28): nested past
		// strictjson.MaxDepth at the top, in a known member and in an
		// unknown one; more descriptors and entries than the limits, under
		// escaped names; a long name; strings that are not UTF-8.
		strings.Repeat("[", 40), strings.Repeat(`{"a":`, 40),
		`{"domain":"edge","descriptors":[{"entries":[{"key":"k","value":` + strings.Repeat("[", 30) + `}]}]}`,
		`{"x":` + strings.Repeat(`{"a":[`, 20) + `1` + strings.Repeat("]}", 20) + `}`,
		`{"domain":"edge","descr\u0069ptors":[` + strings.Repeat(`{},`, service.DefaultMaxDescriptors) + `{}]}`,
		`{"domain":"edge","descriptors":[{"entries":[` + strings.Repeat(`{"key":"k"},`, service.DefaultMaxEntries) + `{}]}]}`,
		`{"x":{"descriptors":[` + strings.Repeat(`{},`, service.DefaultMaxDescriptors) + `{}]}}`,
		`{"` + strings.Repeat("n", 257) + `":1}`,
		"{\"domain\":\"ed\xffge\",\"descriptors\":[{\"entries\":[{\"key\":\"a\"}]}]}",
		`{"domain":"edge","descriptors":[{"entries":[{"key":"a","value":"\ud800"}]}]}`,
	} {
		f.Add([]byte(s))
	}
	e := newEngine(f, nil)
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := DecodeEnvoyJSON(body)
		ref, refErr := protojsonOnly(body, service.RequestBounds{})
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("empty error message for %q", body)
			}
			if refErr == nil {
				t.Fatalf("%q refused (%v), but protojson decodes it to %+v", body, err, ref)
			}
			return
		}
		if refErr != nil || !reflect.DeepEqual(req, ref) {
			t.Fatalf("%q decoded to %+v, protojson to %+v, %v", body, req, ref, refErr)
		}
		checkDecodedEnvoy(t, e, req, true)
	})
}

// FuzzDecodeReleaseRequest: any /v1/release body decodes to a valid request
// with one lease per descriptor, or a clear error, never a panic; the engine
// releases it or rejects it as invalid.
func FuzzDecodeReleaseRequest(f *testing.F) {
	for _, s := range []string{
		`{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"1.2.3.4"}]}],"leases":[1]}`,
		`{"domain":"edge","descriptors":[{"entries":[{"key":"a"}]},{"entries":[{"key":"b"}],"hits":2}],"leases":[0,18446744073709551615]}`,
		`{"domain":"edge","descriptors":[{"entries":[{"key":"a"}],"limit":{"requests_per_unit":1,"unit":"second"}}],"leases":[3]}`,
		`{"domain":"edge","descriptors":[{"entries":[{"key":"a"}]}]}`,
		`{"domain":"edge","descriptors":[{"entries":[{"key":"a"}]}],"leases":[1,2]}`,
		`{"domain":"edge","descriptors":[{"entries":[{"key":"a"}]}],"leases":[-1]}`,
		`{"domain":"edge","descriptors":[{"entries":[{"key":"a"}]}],"leases":null}`,
		`{"leases":[]}`, `[]`, ``,
	} {
		f.Add(s)
	}
	e := newEngine(f, nil)
	f.Fuzz(func(t *testing.T, body string) {
		req, leases, err := DecodeReleaseRequest(strings.NewReader(body))
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("empty error message for %q", body)
			}
			return
		}
		if len(leases) != len(req.Descriptors) {
			t.Fatalf("%d leases for %d descriptors", len(leases), len(req.Descriptors))
		}
		checkDecoded(t, e, req)
		if err := e.ReleaseLeases(context.Background(), req, leases); err != nil && !errors.Is(err, service.ErrInvalidRequest) {
			t.Fatalf("ReleaseLeases: %v, want nil or ErrInvalidRequest", err)
		}
	})
}

// FuzzDecodeChargeRequest: any /v1/charge body decodes to a valid request
// with bounded signed costs, or a clear error, never a panic; the engine
// charges it or rejects it as invalid.
func FuzzDecodeChargeRequest(f *testing.F) {
	for _, s := range []string{
		`{"domain":"edge","hits":3,"descriptors":[{"entries":[{"key":"remote_address","value":"1.2.3.4"}]}]}`,
		`{"domain":"edge","descriptors":[{"entries":[{"key":"a"}],"hits":-4},{"entries":[{"key":"b"}],"hits":0}]}`,
		`{"domain":"edge","hits":1,"descriptors":[{"entries":[{"key":"a"}],"limit":{"requests_per_unit":1,"unit":"second"}}]}`,
		`{"domain":"edge","descriptors":[{"entries":[{"key":"a"}],"hits":-9223372036854775808}]}`,
		`{"domain":"edge","hits":9007199254740991,"descriptors":[{"entries":[{"key":"bucket","value":"x"}]}]}`,
		`{"domain":"edge","descriptors":[{"entries":[{"key":"a"}]}]}`,
		`{"domain":"edge","hits":1.5}`, `{"hits":[]}`, `[]`, ``,
	} {
		f.Add(s)
	}
	e := newEngine(f, nil)
	f.Fuzz(func(t *testing.T, body string) {
		req, err := DecodeChargeRequest(strings.NewReader(body))
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("empty error message for %q", body)
			}
			return
		}
		if req.Domain == "" || len(req.Descriptors) == 0 {
			t.Fatalf("decoded a request without domain or descriptors: %+v", req)
		}
		for i, d := range req.Descriptors {
			if len(d.Entries) == 0 || d.Cost > algorithm.MaxExact || d.Cost < -algorithm.MaxExact {
				t.Fatalf("descriptor %d decoded without entries or with cost %d", i, d.Cost)
			}
		}
		resp, err := e.Charge(context.Background(), req)
		if err != nil {
			if !errors.Is(err, service.ErrInvalidRequest) {
				t.Fatalf("Charge: %v, want nil or ErrInvalidRequest", err)
			}
			return
		}
		if len(resp.Statuses) != len(req.Descriptors) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(req.Descriptors))
		}
	})
}
