package client_test

import (
	"log"
	"net/http"
	"time"

	"github.com/sluice-rl/sluice/client"
)

// A client for a rate-limited API: retries 429 and 503 (Retry-After first,
// else jittered backoff), and paces itself from the RateLimit field.
func Example() {
	c := &http.Client{
		Timeout: 30 * time.Second,
		Transport: &client.Transport{
			Pacing:      true,
			MaxAttempts: 5,
		},
	}
	resp, err := c.Get("https://api.example.com/v1/items")
	if err != nil {
		log.Print(err)
		return
	}
	defer resp.Body.Close()
	log.Print(resp.Status)
}
