// Command middleware shows httplimit wrapping an ordinary net/http server:
// per-IP and per-API-key limits from a rule file, a concurrency limit held
// while the handler runs, and leaky-bucket shaping. See README.md for the
// curl lines that show the headers.
package main

import (
	"context"
	"flag"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/httplimit"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/compose"
)

const ruleFile = `
domain: example
descriptors:
  - key: remote_address
    rate_limit: {name: per_ip, unit: minute, requests_per_unit: 10}
  - key: api_key
    rate_limit: {name: per_key, algorithm: token_bucket, unit: second, requests_per_unit: 5, burst: 10}
  - key: path
    value: /shaped
    rate_limit: {name: shaped, algorithm: leaky_bucket, unit: second, requests_per_unit: 2, burst: 10}
`

func main() {
	addr := flag.String("addr", "127.0.0.1:8082", "listen address")
	flag.Parse()

	snap, err := rules.Parse("example.yaml", []byte(ruleFile), rules.Options{})
	if err != nil {
		log.Fatal(err)
	}
	// The store stack every Sluice program gets (store/compose): in
	// process by default; set Kind "redis" and Redis.URL to share counters
	// with a fleet (placement hybrid and local then work as in sluice serve).
	store, err := compose.New(compose.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	engine, err := service.New(service.DefaultConfig(), service.StaticRules{Snapshot: snap}, store, nil, nil)
	if err != nil {
		log.Fatal(err)
	}
	slowSlots, err := sluice.NewLimiter(store, sluice.Limit{Algorithm: sluice.Concurrency, Quota: 2, Window: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello\n") })
	mux.HandleFunc("/shaped", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "served at "+time.Now().Format("15:04:05.000")+"\n")
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(5 * time.Second):
			io.WriteString(w, "done\n")
		case <-r.Context().Done():
		}
	})

	// No proxies are trusted: every client is keyed by its own address.
	limited, err := httplimit.New(mux, httplimit.Config{
		Checker: engine,
		Domain:  "example",
		Descriptors: [][]httplimit.KeyFunc{
			{httplimit.ClientIP("remote_address", nil)},
			{httplimit.Header("api_key", "X-API-Key")},
			{httplimit.Route("path")},
		},
		Concurrency: []httplimit.Concurrency{{
			Name:    "slow_inflight",
			Limiter: slowSlots,
			// Only /slow holds a slot; other paths report no key.
			Key: func(r *http.Request) (e rules.Entry, ok bool) {
				return rules.Entry{Key: "path", Value: "/slow"}, r.URL.Path == "/slow"
			},
		}},
		Legacy: true,
	})
	if err != nil {
		log.Fatal(err)
	}

	srv := &http.Server{Addr: *addr, Handler: limited, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Printf("listening on http://%s", *addr)
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		log.Fatal(err)
	}
}
