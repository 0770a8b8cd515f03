package httplimit_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/sluice-rl/sluice/httplimit"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/memory"
)

func Example() {
	snap, err := rules.Parse("api.yaml", []byte(`
domain: api
descriptors:
  - key: remote_address
    rate_limit: {name: per_ip, algorithm: token_bucket, unit: second, requests_per_unit: 2}
`), rules.Options{})
	if err != nil {
		log.Fatal(err)
	}
	store := memory.New(memory.Options{})
	defer store.Close()
	engine, err := service.New(service.DefaultConfig(), service.StaticRules{Snapshot: snap}, store, nil, nil)
	if err != nil {
		log.Fatal(err)
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })
	h, err := httplimit.New(hello, httplimit.Config{
		Checker:     engine,
		Domain:      "api",
		Descriptors: [][]httplimit.KeyFunc{{httplimit.ClientIP("remote_address", nil)}},
	})
	if err != nil {
		log.Fatal(err)
	}
	for range 3 {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%d RateLimit: %s Retry-After: %q\n", w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 RateLimit: "per_ip";r=1;t=1 Retry-After: ""
	// 200 RateLimit: "per_ip";r=0;t=1 Retry-After: ""
	// 429 RateLimit: "per_ip";r=0;t=1 Retry-After: "1"
}
