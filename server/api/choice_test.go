package api

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/storetest"
)

// choiceRules: a key's own limit beside per-model limits of choice group
// "model" (gpt-4o 1 per minute, any other model 2).
const choiceRules = `domain: llm
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: model
        value: gpt-4o
        rate_limit: {unit: minute, requests_per_unit: 1, choice: model}
      - key: model
        rate_limit: {unit: minute, requests_per_unit: 2, choice: model}
`

// choiceBody is a /v1/check body for key: its own descriptor, then
// gpt-4o, then gpt-4o-mini.
func choiceBody(key string) string {
	d := func(kv ...string) string {
		var es []string
		for i := 0; i < len(kv); i += 2 {
			es = append(es, fmt.Sprintf(`{"key":%q,"value":%q}`, kv[i], kv[i+1]))
		}
		return `{"entries":[` + strings.Join(es, ",") + `]}`
	}
	return `{"domain":"llm","descriptors":[` + d("api_key", key) + "," + d("api_key", key, "model", "gpt-4o") + "," + d("api_key", key, "model", "gpt-4o-mini") + `]}`
}

// serveChoice serves the API over a real HTTP server, with an engine on
// st deciding choiceRules.
func serveChoice(t *testing.T, st sluice.Store) *httptest.Server {
	t.Helper()
	return serveChoiceRules(t, st, choiceRules, Options{})
}

// serveChoiceRules is serveChoice deciding the rule file yaml, with the
// server's options opts (its Checker set here).
func serveChoiceRules(t *testing.T, st sluice.Store, yaml string, opts Options) *httptest.Server {
	t.Helper()
	snap, err := rules.Parse("llm.yaml", []byte(yaml), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e, err := service.New(service.DefaultConfig(), service.StaticRules{Snapshot: snap}, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	opts.Checker = e
	h, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// postChoice sends body to the server's path and returns the status, the
// Sluice-Choice header and the body; an error is reported (t.Error, safe
// from any goroutine) as status 0.
func postChoice(t *testing.T, srv *httptest.Server, path, body string) (int, string, []byte) {
	t.Helper()
	resp, err := srv.Client().Post(srv.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return 0, "", nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Error(err)
		return 0, "", nil
	}
	return resp.StatusCode, resp.Header.Get(ChoiceHeader), b
}

// choiceStores runs f on a memory store and on Redis (single and
// Cluster), each on a fake clock.
func choiceStores(t *testing.T, f func(t *testing.T, st sluice.Store)) {
	t.Run("memory", func(t *testing.T) {
		clock := storetest.NewClock()
		st := memory.New(memory.Options{Now: clock.Now})
		t.Cleanup(func() { st.Close() })
		f(t, st)
	})
	for _, mode := range []string{"redis", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			url := ""
			if mode == "redis" {
				url = redistest.Start(t).URL()
			} else {
				url = redistest.StartCluster(t).URL()
			}
			clock := storetest.NewClock()
			st, err := redis.New(redis.Options{URL: url, Now: clock.Now, Timeout: 5 * time.Second, Prefix: fmt.Sprintf("t%d:", time.Now().UnixNano())})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			f(t, st)
		})
	}
}

// TestChoiceHTTP: first with quota over HTTP, on memory and Redis (single
// and Cluster): POST /v1/check answers the chosen model in its choice
// field and the Sluice-Choice header (gpt-4o while it has quota, then
// gpt-4o-mini, then none: denied, each model's status over); an untried
// alternative says so; POST /json carries the choice in dynamicMetadata.
// Then many clients at once: each model admits exactly its limit.
func TestChoiceHTTP(t *testing.T) {
	choiceStores(t, func(t *testing.T, st sluice.Store) {
		srv := serveChoice(t, st)
		want := []struct {
			value, header string
			index         int
			codes         []string
		}{
			{"gpt-4o", `model="gpt-4o";key="model";index=0`, 0, []string{"OK", "OK", "OK"}},
			{"gpt-4o-mini", `model="gpt-4o-mini";key="model";index=1`, 1, []string{"OK", "OVER_LIMIT", "OK"}},
			{"gpt-4o-mini", `model="gpt-4o-mini";key="model";index=1`, 1, []string{"OK", "OVER_LIMIT", "OK"}},
			{"", "", 0, []string{"OK", "OVER_LIMIT", "OVER_LIMIT"}},
		}
		for i, w := range want {
			code, header, body := postChoice(t, srv, "/v1/check", choiceBody("k"))
			var resp CheckResponse
			if err := json.Unmarshal(body, &resp); err != nil || code != http.StatusOK {
				t.Fatalf("call %d: %d %s (%v)", i, code, body, err)
			}
			c, ok := resp.Choice["model"]
			if ok != (w.value != "") || c.Value != w.value || c.Index != w.index || header != w.header {
				t.Errorf("call %d: choice %+v (%v), header %q; want %q index %d, header %q (body %s)", i, c, ok, header, w.value, w.index, w.header, body)
			}
			if ok && (c.Key != "model" || c.Descriptor != w.index+1) {
				t.Errorf("call %d: choice %+v, want key model, descriptor %d", i, c, w.index+1)
			}
			if resp.Allowed != (w.value != "") {
				t.Errorf("call %d: allowed %v", i, resp.Allowed)
			}
			for j, s := range resp.Statuses {
				if s.Code != w.codes[j] {
					t.Errorf("call %d: status %d %s, want %s", i, j, s.Code, w.codes[j])
				}
			}
			if i == 1 && (!resp.Statuses[1].PassedOver || resp.Statuses[1].RetryAfterMs <= 0) {
				t.Errorf("call 1: gpt-4o's status %+v, want passed over, with its wait", resp.Statuses[1])
			}
			if i == 0 && (!resp.Statuses[2].Untried || resp.Statuses[2].Limit != nil) {
				t.Errorf("call 0: gpt-4o-mini's status %+v, want untried, without a limit", resp.Statuses[2])
			}
		}
		code, _, body := postChoice(t, srv, "/json", `{"domain":"llm","descriptors":[{"entries":[{"key":"api_key","value":"j"},{"key":"model","value":"gpt-4o"}]}]}`)
		if code != http.StatusOK || !strings.Contains(string(body), `"dynamicMetadata":{"sluice.choice":{"model":{`) || !strings.Contains(string(body), `"value":"gpt-4o"`) {
			t.Errorf("POST /json = %d %s, want 200 with the choice in dynamicMetadata", code, body)
		}

		const clients, each = 8, 4 // 32 requests for 1 + 2 admissions
		var mu sync.Mutex
		chosen := map[string]int{}
		var wg sync.WaitGroup
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range each {
					_, header, body := postChoice(t, srv, "/v1/check", choiceBody("many"))
					var resp CheckResponse
					if err := json.Unmarshal(body, &resp); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					if c, ok := resp.Choice["model"]; ok {
						chosen[c.Value]++
						if !strings.HasPrefix(header, fmt.Sprintf("model=%q", c.Value)) {
							t.Errorf("header %q for choice %s", header, c.Value)
						}
					} else {
						chosen[""]++
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if chosen["gpt-4o"] != 1 || chosen["gpt-4o-mini"] != 2 || chosen[""] != clients*each-3 {
			t.Errorf("admissions %v, want gpt-4o 1, gpt-4o-mini 2 (the limits), the rest denied", chosen)
		}
	})
}

// TestChoiceHeader: the Sluice-Choice value escapes '"' and '\', and is
// left out for a value a structured-field string cannot carry.
func TestChoiceHeader(t *testing.T) {
	tests := []struct {
		c    *service.Choice
		want string
		ok   bool
	}{
		{nil, "", false},
		{&service.Choice{Group: "tier", Key: "t", Value: `a"b\c`, Index: 2}, `tier="a\"b\\c";key="t";index=2`, true},
		{&service.Choice{Group: "model", Key: "model", Value: "modèle"}, "", false},
		{&service.Choice{Group: "model", Key: "m\n", Value: "x"}, "", false},
	}
	for _, tt := range tests {
		if got, ok := choiceHeader(tt.c); got != tt.want || ok != tt.ok {
			t.Errorf("choiceHeader(%+v) = %q, %v; want %q, %v", tt.c, got, ok, tt.want, tt.ok)
		}
	}
}

// TestChoiceRetryAfter: when every alternative is over, the request can
// go again as soon as the first of them frees, so Retry-After is that
// one's wait (a minute), not the longest (an hour); the later one is
// passed over.
func TestChoiceRetryAfter(t *testing.T) {
	clock := storetest.NewClock()
	st := memory.New(memory.Options{Now: clock.Now})
	t.Cleanup(func() { st.Close() })
	srv := serveChoiceRules(t, st, `domain: llm
descriptors:
  - key: api_key
    descriptors:
      - key: model
        value: gpt-4o
        rate_limit: {unit: hour, requests_per_unit: 1, choice: model}
      - key: model
        rate_limit: {unit: minute, requests_per_unit: 1, choice: model}
`, Options{ResponseHeaders: true})
	body := `{"domain":"llm","descriptors":[{"entries":[{"key":"api_key","value":"k"},{"key":"model","value":"gpt-4o"}]},` +
		`{"entries":[{"key":"api_key","value":"k"},{"key":"model","value":"gpt-4o-mini"}]}]}`
	for i, allowed := range []bool{true, true, false} {
		resp, err := srv.Client().Post(srv.URL+"/v1/check", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var answer struct{ Allowed bool }
		err = json.NewDecoder(resp.Body).Decode(&answer)
		resp.Body.Close()
		if err != nil || answer.Allowed != allowed {
			t.Fatalf("request %d: allowed %v (%v), want %v", i+1, answer.Allowed, err, allowed)
		}
		if allowed {
			continue
		}
		ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if err != nil || ra < 1 || ra > 60 {
			t.Errorf("Retry-After %q, want the minute window's wait (1 to 60 s), not the hour's", resp.Header.Get("Retry-After"))
		}
	}
}
