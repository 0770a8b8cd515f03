package redis

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
)

func TestExchangePublishCollect(t *testing.T) {
	rd := redistest.Start(t)
	a, err := New(Options{URL: rd.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := New(Options{URL: rd.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	if err := a.Publish(ctx, "a", []byte(`{"x":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, "b", []byte("two|pipes|inside")); err != nil {
		t.Fatal(err)
	}
	// An instance that stopped publishing long ago is dropped.
	old := strconv.FormatInt(time.Now().Add(-time.Hour).UnixMilli(), 10) + "|gone"
	if _, err := rd.Do("HSET", a.exchangeKey(), "c", old); err != nil {
		t.Fatal(err)
	}
	got, err := b.Collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || string(got["a"]) != `{"x":1}` || string(got["b"]) != "two|pipes|inside" {
		t.Errorf("Collect = %q, want a and b's blobs only", got)
	}
	if n, err := rd.Do("HLEN", a.exchangeKey()); err != nil || n != int64(2) {
		t.Errorf("HLEN after Collect = %v, %v; want 2 (the stale field removed)", n, err)
	}
	if ttl, err := rd.Do("PTTL", a.exchangeKey()); err != nil || ttl.(int64) <= 0 {
		t.Errorf("PTTL = %v, %v; want a TTL on the hash", ttl, err)
	}
}
