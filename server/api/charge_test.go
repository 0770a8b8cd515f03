package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/server/admin"
	"github.com/sluice-rl/sluice/service"
)

const (
	rwToken     = "rw-token-0123456789abcdef"
	roToken     = "ro-token-0123456789abcdef"
	chargeToken = "charge-token-0123456789abcdef"
)

// chargeHandler serves the API with charges behind admin tokens, as sluice
// serve does.
func chargeHandler(t *testing.T, e *service.Engine) http.Handler {
	t.Helper()
	toks := &admin.Tokens{}
	if err := toks.Add("ops", admin.ReadWrite, rwToken); err != nil {
		t.Fatal(err)
	}
	if err := toks.Add("viewer", admin.ReadOnly, roToken); err != nil {
		t.Fatal(err)
	}
	if err := toks.Add("billing", admin.ChargeOnly, chargeToken); err != nil {
		t.Fatal(err)
	}
	h, err := New(Options{Checker: e, Charger: e, ChargeAuth: toks.Charge(), MaxBodyBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// post sends body to path with a bearer token ("" for none).
func post(t *testing.T, h http.Handler, path, token, body string) (int, string) {
	t.Helper()
	req := httptest.NewRequest("POST", path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

func TestChargeEndpoint(t *testing.T) {
	e := newEngine(t, nil)
	h := chargeHandler(t, e)
	ip := `{"entries":[{"key":"remote_address","value":"1.2.3.4"}]}`
	charge := func(hits string) ChargeStatus {
		t.Helper()
		code, out := post(t, h, "/v1/charge", rwToken, `{"domain":"edge","hits":`+hits+`,"descriptors":[`+ip+`]}`)
		var got ChargeResponse
		if err := json.Unmarshal([]byte(out), &got); code != 200 || err != nil || len(got.Statuses) != 1 {
			t.Fatalf("POST /v1/charge hits %s = %d %s (%v), want 200 with one status", hits, code, out, err)
		}
		if !strings.Contains(out, `"remaining":`) || !strings.Contains(out, `"reset_after_ms":`) {
			t.Errorf("charge answer without remaining or reset_after_ms: %s", out)
		}
		return got.Statuses[0]
	}
	look := func() CheckStatus {
		t.Helper()
		code, out := post(t, h, "/v1/check", "", `{"domain":"edge","hits":0,"descriptors":[`+ip+`]}`)
		var got CheckResponse
		if err := json.Unmarshal([]byte(out), &got); code != 200 || err != nil {
			t.Fatalf("POST /v1/check = %d %s (%v)", code, out, err)
		}
		return got.Statuses[0]
	}
	for _, step := range []struct {
		hits string
		want int64 // remaining after, in the charge's answer and a check's
	}{
		{"1", 1},  // charge then check sees less
		{"-5", 2}, // a refund never goes above the limit
		{"5", 0},  // into debt
	} {
		st := charge(step.hits)
		if st.Rule != "remote_address" || st.Limit == nil || st.Remaining == nil || *st.Remaining != step.want || st.ResetAfterMs == nil || st.Skipped != "" {
			t.Errorf("charge %s: %s, want rule remote_address with %d remaining", step.hits, marshal(st), step.want)
		}
		if got := look().Remaining; got != step.want {
			t.Errorf("check after charge %s: remaining %d, want %d", step.hits, got, step.want)
		}
	}
	code, out := post(t, h, "/v1/check", "", `{"domain":"edge","descriptors":[`+ip+`]}`)
	if code != 200 || !strings.Contains(out, `"allowed":false`) {
		t.Errorf("check in debt = %d %s, want denied", code, out)
	}

	code, out = post(t, h, "/v1/charge", rwToken, `{"domain":"edge","hits":3,"descriptors":[{"entries":[{"key":"ldap","value":"x"}]},{"entries":[{"key":"nope","value":"x"}]}]}`)
	if code != 200 || !strings.Contains(out, `"skipped":"unlimited"`) || !strings.Contains(out, `"skipped":"no_limit"`) || strings.Contains(out, `"remaining"`) {
		t.Errorf("charge of an unlimited and an unmatched descriptor = %d %s, want both skipped, without remaining", code, out)
	}

	for _, tt := range []struct {
		name, token, body string
		code              int
		want              string
	}{
		{"no token", "", `{"domain":"edge","hits":1,"descriptors":[` + ip + `]}`, 401, "bearer token is required"},
		{"wrong token", "nope-nope-nope-nope-nope", `{"domain":"edge","hits":1,"descriptors":[` + ip + `]}`, 401, "bearer token is required"},
		{"read-only token", roToken, `{"domain":"edge","hits":1,"descriptors":[` + ip + `]}`, 403, "read-only"},
		{"charge-only token", chargeToken, `{"domain":"edge","hits":0,"descriptors":[` + ip + `]}`, 200, `"statuses"`},
		{"no hits", rwToken, `{"domain":"edge","descriptors":[` + ip + `]}`, 400, "descriptors[0].hits: missing"},
		{"hits beyond 2^53", rwToken, `{"domain":"edge","hits":-9007199254740992,"descriptors":[` + ip + `]}`, 400, "hits: -9007199254740992 is beyond"},
		{"descriptor hits beyond 2^53", rwToken, `{"domain":"edge","descriptors":[{"entries":[{"key":"a"}],"hits":9007199254740992}]}`, 400, "descriptors[0].hits: 9007199254740992 is beyond"},
		{"hits not an integer", rwToken, `{"domain":"edge","descriptors":[{"entries":[{"key":"a"}],"hits":1.5}]}`, 400, "descriptors[0].hits: got JSON number 1.5, want an integer in range"},
		{"unknown field", rwToken, `{"domain":"edge","hits":1,"descriptors":[` + ip + `],"cost":1}`, 400, `unknown field \"cost\"`},
		{"empty key", rwToken, `{"domain":"edge","hits":1,"descriptors":[{"entries":[{"key":""}]}]}`, 400, "descriptors[0].entries[0].key: empty"},
		{"too big", rwToken, strings.Repeat(" ", 2000), 413, "max-request-bytes=1024"},
	} {
		code, out := post(t, h, "/v1/charge", tt.token, tt.body)
		if code != tt.code || !strings.Contains(out, tt.want) {
			t.Errorf("%s: POST /v1/charge = %d %s, want %d containing %q", tt.name, code, out, tt.code, tt.want)
		}
		if strings.Contains(out, rwToken) || strings.Contains(out, roToken) {
			t.Errorf("%s: the answer holds a token", tt.name)
		}
	}
	if got := look().Remaining; got != 0 {
		t.Errorf("after refused charges: remaining %d, want still 0 (nothing charged or refunded)", got)
	}
}

func TestChargeEndpointOff(t *testing.T) {
	e := newEngine(t, nil)
	h, err := New(Options{Checker: e})
	if err != nil {
		t.Fatal(err)
	}
	if code, out := post(t, h, "/v1/charge", rwToken, `{}`); code != 404 || !strings.Contains(out, "off") {
		t.Errorf("POST /v1/charge without a Charger = %d %s, want 404 saying charges are off", code, out)
	}
	if _, err := New(Options{Checker: e, Charger: e}); err == nil || !strings.Contains(err.Error(), "ChargeAuth") {
		t.Errorf("New with a Charger and no ChargeAuth: %v, want an error naming ChargeAuth", err)
	}
}

func TestChargeEndpointStoreDown(t *testing.T) {
	snap, err := rules.Parse("edge.yaml", []byte(testRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e, err := service.New(service.DefaultConfig(), service.StaticRules{Snapshot: snap}, downStore{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := chargeHandler(t, e)
	code, out := post(t, h, "/v1/charge", rwToken, `{"domain":"edge","hits":1,"descriptors":[{"entries":[{"key":"remote_address","value":"1.2.3.4"}]}]}`)
	if code != 503 || !strings.Contains(out, "connection refused") || !strings.Contains(out, "may or may not") {
		t.Errorf("POST /v1/charge with the store down = %d %s, want 503 saying the outcome is unknown", code, out)
	}
}

func TestDecodeChargeRequest(t *testing.T) {
	req, err := DecodeChargeRequest(strings.NewReader(`{"domain":"edge","hits":-2,"descriptors":[
		{"entries":[{"key":"a","value":"1"}]},
		{"entries":[{"key":"b"}],"hits":7,"limit":{"requests_per_unit":9,"unit":"Minute"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	d0, d1 := req.Descriptors[0], req.Descriptors[1]
	if req.Domain != "edge" || len(req.Descriptors) != 2 || d0.Cost != -2 || d0.Limit != nil || len(d0.Entries) != 1 ||
		d0.Entries[0] != (rules.Entry{Key: "a", Value: "1"}) || d1.Cost != 7 || d1.Limit == nil || *d1.Limit != (service.LimitOverride{RequestsPerUnit: 9, Unit: "minute"}) {
		t.Errorf("DecodeChargeRequest = %+v, want the request as written (descriptor hits over the top level's)", req)
	}
}
