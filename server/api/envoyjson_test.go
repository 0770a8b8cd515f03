package api

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluice-rl/sluice/internal/rlsproto"
	"github.com/sluice-rl/sluice/internal/strictjson"
	"github.com/sluice-rl/sluice/service"
)

// protojsonOnly is what /json did before boundEnvoyJSON: protojson, then
// the conversion. decodeEnvoyJSON must agree with it on every body.
func protojsonOnly(b []byte, lim service.RequestBounds) (service.Request, error) {
	var pr rlsv3.RateLimitRequest
	if err := protojson.Unmarshal(b, &pr); err != nil {
		return service.Request{}, err
	}
	return rlsproto.FromProtoLimits(&pr, lim)
}

// TestEnvoyJSONBounds: /json refuses, before protojson holds anything,
// descriptors and entries over the limits (found under either spelling of
// their names, escapes decoded), nesting past strictjson.MaxDepth and names
// past strictjson.MaxNameBytes; the same arrays inside a member protojson
// does not know are not counted (protojson refuses the member), and bodies
// within the bounds decode as protojson decodes them.
func TestEnvoyJSONBounds(t *testing.T) {
	lim := service.RequestBounds{MaxDescriptors: 3, MaxEntries: 2}
	entry := `{"key":"k","value":"v"}`
	desc := func(entries int) string {
		return `{"entries":[` + strings.TrimSuffix(strings.Repeat(entry+",", entries), ",") + `]}`
	}
	descs := func(n, entries int) string { return strings.TrimSuffix(strings.Repeat(desc(entries)+",", n), ",") }
	nested := func(levels int) string { // levels opened inside an entry's value, the entry at level 5
		return `{"domain":"edge","descriptors":[{"entries":[{"key":"k","value":` + strings.Repeat("[", levels) + strings.Repeat("]", levels) + `}]}]}`
	}
	tests := []struct {
		name, body string
		limit      string // the *service.LimitError's limit, if any
		want       string // in the error; "" decodes
	}{
		{"within the limits", `{"domain":"edge","descriptors":[` + descs(3, 2) + `]}`, "", ""},
		{"descriptors over", `{"domain":"edge","descriptors":[` + descs(4, 1) + `]}`, "max-descriptors", "descriptors: 4 exceeds the limit max-descriptors=3"},
		{"descriptors over, name escaped", `{"domain":"edge","descr\u0069ptors":[` + descs(4, 1) + `]}`, "max-descriptors", "descriptors: 4 exceeds the limit max-descriptors=3"},
		{"descriptors, name escaped, within", `{"domain":"edge","\u0064escriptors":[` + descs(2, 1) + `]}`, "", ""},
		{"entries over in the third", `{"domain":"edge","descriptors":[` + descs(2, 1) + `,` + desc(3) + `]}`, "max-entries", "descriptors[2].entries: 3 exceeds the limit max-entries=2"},
		{"entries over, name escaped", `{"domain":"edge","descriptors":[{"\u0065ntries":[` + strings.Repeat(entry+",", 4) + entry + `]}]}`, "max-entries", "descriptors[0].entries: 5 exceeds the limit max-entries=2"},
		{"empty entries over", `{"domain":"edge","descriptors":[{"entries":[{},{},{}]}]}`, "max-entries", "descriptors[0].entries: 3 exceeds"},
		{"over, then an unknown member", `{"domain":"edge","descriptors":[` + descs(5, 1) + `],"nope":1}`, "max-descriptors", "descriptors: 5 exceeds"},
		{"descriptors in an unknown member", `{"x":{"descriptors":[` + descs(5, 1) + `]}}`, "", `unknown field "x"`},
		{"descriptors in a descriptor", `{"domain":"edge","descriptors":[{"descriptors":[` + descs(5, 1) + `]}]}`, "", `unknown field "descriptors"`},
		{"entries at the top", `{"domain":"edge","entries":[` + strings.Repeat(entry+",", 4) + entry + `]}`, "", `unknown field "entries"`},
		{"descriptors of the wrong type", `{"domain":"edge","descriptors":{"entries":[{},{},{}]}}`, "", "unexpected token {"},
		{"16 levels", nested(strictjson.MaxDepth - 5), "", "value"},
		{"17 levels", nested(strictjson.MaxDepth - 4), "", "nesting deeper than 16 levels at byte 74"},
		{"17 levels of objects", `{"x":` + strings.Repeat(`{"a":`, 16) + "1" + strings.Repeat("}", 17), "", "nesting deeper than 16 levels at byte 80"},
		{"name of 256 bytes", `{"` + strings.Repeat("n", 256) + `":1}`, "", "unknown field"},
		{"name of 257 bytes", `{"` + strings.Repeat("n", 257) + `":1}`, "", "member name longer than 256 bytes at byte 1"},
		{"empty", ``, "", "body: empty, want an object"},
		{"truncated", `{"domain":"edge","descriptors":[`, "", "body: truncated JSON"},
		{"not JSON", `{"domain":"edge",]`, "", "body: invalid JSON at byte 16"},
		{"two values", `{"domain":"edge","descriptors":[` + desc(1) + `]} {}`, "", "body:"},
		{"a scalar", `5`, "", "body:"},
		{"long unit, message cut", `{"domain":"edge","descriptors":[{"entries":[` + entry + `],"limit":{"requestsPerUnit":1,"unit":"` + strings.Repeat("u", 4000) + `"}}]}`, "", "…"},
	}
	for _, tt := range tests {
		got, err := decodeEnvoyJSON([]byte(tt.body), lim)
		ref, refErr := protojsonOnly([]byte(tt.body), lim)
		switch {
		case tt.want == "":
			if err != nil || refErr != nil || !reflect.DeepEqual(got, ref) {
				t.Errorf("%s: %+v, %v; want %+v as protojson decodes it (its error: %v)", tt.name, got, err, ref, refErr)
			}
			continue
		case err == nil || !strings.Contains(err.Error(), tt.want):
			t.Errorf("%s: error %v, want one containing %q", tt.name, err, tt.want)
		case len(err.Error()) > 400:
			t.Errorf("%s: error of %d bytes, want at most 400", tt.name, len(err.Error()))
		case refErr == nil:
			t.Errorf("%s: refused (%v), but protojson decodes it to %+v", tt.name, err, ref)
		}
		var le *service.LimitError
		if errors.As(err, &le) != (tt.limit != "") || (le != nil && le.Limit != tt.limit) {
			t.Errorf("%s: error %v wraps LimitError %+v, want one for %q", tt.name, err, le, tt.limit)
		}
		if tt.limit != "" && !errors.Is(err, rlsproto.ErrInvalidRequest) {
			t.Errorf("%s: error %v does not wrap rlsproto.ErrInvalidRequest (as FromProtoLimits's does)", tt.name, err)
		}
	}
}

// TestEnvoyJSONNames: every spelling protojson accepts for the fields
// Sluice reads (lowerCamel and proto names, numbers as strings, enums by
// name and number, null) decodes as protojson decodes it.
func TestEnvoyJSONNames(t *testing.T) {
	for i, body := range []string{
		`{"domain":"edge","hitsAddend":3,"descriptors":[{"entries":[{"key":"a","value":"1"}],"hitsAddend":"0","isNegativeHits":true}]}`,
		`{"domain":"edge","hits_addend":"3","descriptors":[{"entries":[{"key":"a","value":"1"}],"hits_addend":7,"is_negative_hits":false}]}`,
		`{"domain":"edge","descriptors":[{"entries":[{"key":"a"}],"limit":{"requestsPerUnit":5,"unit":"MINUTE"}}]}`,
		`{"domain":"edge","descriptors":[{"entries":[{"key":"a"}],"limit":{"requests_per_unit":"5","unit":3,"unit_multiplier":1}}]}`,
		`{"domain":"edge","descriptors":[{"entries":[{"key":"a"}],"limit":null,"hitsAddend":null}],"hitsAddend":null}`,
		`{"domain":"edge","descriptors":[{"entries":[]},{}]}`,
		` {"descriptors" : [ {"entries" : [ {"value":"v","key":"k"} ] } ] , "domain" : "edge" } `,
	} {
		got, err := decodeEnvoyJSON([]byte(body), service.RequestBounds{})
		ref, refErr := protojsonOnly([]byte(body), service.RequestBounds{})
		if fmt.Sprint(err) != fmt.Sprint(refErr) || !reflect.DeepEqual(got, ref) {
			t.Errorf("#%d %s: %+v, %v; want %+v, %v as protojson decodes it", i, body, got, err, ref, refErr)
		}
	}
}
