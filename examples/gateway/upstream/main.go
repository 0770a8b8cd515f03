// Command upstream is the API the gateway example protects: it answers every
// request with a small JSON document. Run it, then `sluice proxy` in front.
package main

import (
	"encoding/json"
	"flag"
	"log"
	"net/http"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9000", "listen address")
	flag.Parse()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{
			"path":            r.URL.Path,
			"x_forwarded_for": r.Header.Get("X-Forwarded-For"),
			"time":            time.Now().UTC().Format(time.RFC3339),
		})
	})
	srv := &http.Server{Addr: *addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	log.Printf("upstream API on http://%s", *addr)
	log.Fatal(srv.ListenAndServe())
}
