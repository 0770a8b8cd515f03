package redis

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/stack"
	"github.com/sluice-rl/sluice/store/storetest"
)

func TestCRC16(t *testing.T) {
	// The check value of CRC-16/XMODEM, and slots Redis documents.
	if got := crc16("123456789"); got != 0x31C3 {
		t.Errorf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	for _, tt := range []struct {
		key  string
		slot int
	}{
		{"foo", 12182},
		{"bar", 5061},
		{"{user1000}.following", 3443},
		{"{user1000}.followers", 3443},
		{"foo{}{bar}", slotOf("foo{}{bar}")}, // empty first tag: the whole key
	} {
		if got := slotOf(tt.key); got != tt.slot {
			t.Errorf("slotOf(%q) = %d, want %d", tt.key, got, tt.slot)
		}
	}
}

func TestHashTagAndKey(t *testing.T) {
	for _, tt := range []struct {
		key, tag string
		has      bool
		redis    string
	}{
		{"user:1", "user:1", false, "p:g{user:1}"},
		{"{acme}:per_user:1", "acme", true, "p:g{acme}:per_user:1"},
		{"a{b}c{d}", "b", true, "p:ga{b}c{d}"},
		{"a{}b", "a{}b", false, "p:g{a{}b}"},
		{"a{b", "a{b", false, "p:g{a{b}"},
		{"", "", false, "p:g{}"},
	} {
		tag, has := hashTag(tt.key)
		if tag != tt.tag || has != tt.has {
			t.Errorf("hashTag(%q) = %q, %v; want %q, %v", tt.key, tag, has, tt.tag, tt.has)
		}
		if got := redisKey("p:", sluice.GCRA, tt.key); got != tt.redis {
			t.Errorf("redisKey(p:, gcra, %q) = %q, want %q", tt.key, got, tt.redis)
		}
	}
	// Keys sharing a tag share a slot whatever the algorithm.
	a := slotOf(redisKey("sluice:", sluice.TokenBucket, "{t42}:user"))
	b := slotOf(redisKey("sluice:", sluice.Concurrency, "{t42}:tenant"))
	if a != b {
		t.Errorf("keys with tag {t42} in slots %d and %d, want one slot", a, b)
	}
}

func TestParseURL(t *testing.T) {
	for _, tt := range []struct {
		url     string
		prefix  string
		timeout time.Duration
		addrs   []string
		master  string
		db      int
		tls     bool
	}{
		{url: "redis://127.0.0.1:6379/0", addrs: []string{"127.0.0.1:6379"}},
		{url: "redis://localhost/3", addrs: []string{"localhost:6379"}, db: 3},
		{url: "rediss://u:pw@cache:6380/0?prefix=rl:&timeout=20ms", addrs: []string{"cache:6380"}, prefix: "rl:", timeout: 20 * time.Millisecond, tls: true},
		{url: "redis://a:1?addr=b:2&addr=c:3", addrs: []string{"a:1", "b:2", "c:3"}},
		{url: "redis-cluster://a:1,b:2,c:3", addrs: []string{"a:1", "b:2", "c:3"}},
		{url: "redis-sentinel://s1:26379,s2:26379/mymaster", addrs: []string{"s1:26379", "s2:26379"}, master: "mymaster"},
		{url: "redis://s1:26379?master_set=mymaster", addrs: []string{"s1:26379"}, master: "mymaster"},
	} {
		o, err := ParseURL(tt.url)
		if err != nil {
			t.Errorf("ParseURL(%q) = %v", tt.url, err)
			continue
		}
		if o.Prefix != tt.prefix || o.Timeout != tt.timeout {
			t.Errorf("ParseURL(%q): prefix %q timeout %v, want %q %v", tt.url, o.Prefix, o.Timeout, tt.prefix, tt.timeout)
		}
		if strings.Contains(o.URL, "prefix=") || strings.Contains(o.URL, "timeout=") {
			t.Errorf("ParseURL(%q).URL = %q still has our parameters", tt.url, o.URL)
		}
		co, err := clientOption(o.URL)
		if err != nil {
			t.Errorf("clientOption(%q) = %v", o.URL, err)
			continue
		}
		if strings.Join(co.InitAddress, ",") != strings.Join(tt.addrs, ",") {
			t.Errorf("ParseURL(%q): addresses %v, want %v", tt.url, co.InitAddress, tt.addrs)
		}
		if co.Sentinel.MasterSet != tt.master || co.SelectDB != tt.db || (co.TLSConfig != nil) != tt.tls {
			t.Errorf("ParseURL(%q): master %q db %d tls %v, want %q %d %v", tt.url, co.Sentinel.MasterSet, co.SelectDB, co.TLSConfig != nil, tt.master, tt.db, tt.tls)
		}
	}
	for _, bad := range []string{
		"", "localhost:6379", "http://x", "redis://x/1/2", "redis://x?timeout=soon",
		"redis://x?timeout=-1s", "redis-sentinel://s1:26379", "redis-sentinel://s1/a/b",
		"redis-cluster://a:1,,b:2", "redis-cluster://a:1/0", "redis-cluster://",
		"redis://x/notanumber", "redis://u:secret@x/zz",
	} {
		if _, err := ParseURL(bad); err == nil {
			t.Errorf("ParseURL(%q) = nil error, want one", bad)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("ParseURL(%q) error %q shows the password", bad, err)
		}
	}
}

func FuzzParseURL(f *testing.F) {
	for _, s := range []string{
		"redis://127.0.0.1:6379/0", "rediss://u:p@h:1/2?prefix=a:&timeout=5ms",
		"redis-sentinel://a:1,b:2/m", "redis-cluster://a:1,b:2", "unix:///tmp/r.sock",
		"redis://%zz", "redis-cluster://,", "redis://h?addr=", "redis-sentinel://@/",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		o, err := ParseURL(s)
		if err != nil {
			return
		}
		if o.Timeout < 0 {
			t.Fatalf("ParseURL(%q) gave a negative timeout %v", s, o.Timeout)
		}
		if _, err := clientOption(o.URL); err != nil {
			t.Fatalf("ParseURL(%q) accepted it but its URL %q does not parse: %v", s, o.URL, err)
		}
	})
}

func TestNewErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts Options
	}{
		{"no URL", Options{}},
		{"bad scheme", Options{URL: "http://127.0.0.1:1"}},
		{"brace in prefix", Options{URL: "redis://127.0.0.1:1", Prefix: "a{b}:"}},
		{"negative timeout", Options{URL: "redis://127.0.0.1:1", Timeout: -time.Second}},
		{"nothing listening", Options{URL: "redis://127.0.0.1:1"}},
	} {
		if s, err := New(tt.opts); err == nil {
			s.Close()
			t.Errorf("%s: New(%+v) = nil error, want one", tt.name, tt.opts)
		}
	}
}

func TestTakeErrors(t *testing.T) {
	srv := redistest.Start(t)
	st := newTestStore(t, srv.URL(), storetest.NewClock())
	good := sluice.Op{Key: "k", Limit: sluice.Limit{Algorithm: sluice.GCRA, Quota: 5, Window: time.Second}, Cost: 1}
	if err := st.Take(context.Background(), []sluice.Op{good}, nil); !errors.Is(err, stack.ErrResultsLength) {
		t.Errorf("Take with no results = %v, want ErrResultsLength", err)
	}
	bad := good
	bad.Cost = -1
	if err := st.Take(context.Background(), []sluice.Op{good, bad}, make([]sluice.Result, 2)); err == nil {
		t.Error("Take with a negative cost = nil, want an error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := st.Take(ctx, []sluice.Op{good}, make([]sluice.Result, 1)); !errors.Is(err, context.Canceled) {
		t.Errorf("Take with a canceled context = %v, want context.Canceled", err)
	}
	if err := st.Take(context.Background(), nil, nil); err != nil {
		t.Errorf("Take with no ops = %v, want nil", err)
	}
	st.Close()
	if err := st.Take(context.Background(), []sluice.Op{good}, make([]sluice.Result, 1)); !errors.Is(err, ErrClosed) {
		t.Errorf("Take after Close = %v, want ErrClosed", err)
	}
}

// TestCoalescing checks that concurrent Takes share script calls and that
// leases are distinct and nonzero.
func TestCoalescing(t *testing.T) {
	srv := redistest.Start(t)
	st, err := New(Options{URL: srv.URL(), Prefix: "co:", MaxInFlight: 1, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	limit := sluice.Limit{Algorithm: sluice.Concurrency, Quota: 10000, Window: time.Minute}
	var mu sync.Mutex
	seen := map[uint64]bool{}
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := make([]sluice.Result, 1)
			for range 20 {
				if err := st.Take(context.Background(), []sluice.Op{{Key: "lease", Limit: limit, Cost: 1}}, res); err != nil {
					t.Errorf("goroutine %d: %v", g, err)
					return
				}
				mu.Lock()
				if res[0].Lease == 0 || seen[res[0].Lease] {
					t.Errorf("lease %d: zero or seen before", res[0].Lease)
				}
				seen[res[0].Lease] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	s := st.Stats()
	if s.Groups != 32*20 || s.Ops != 32*20 {
		t.Errorf("Stats = %+v, want %d groups and ops", s, 32*20)
	}
	if s.Calls >= s.Groups {
		t.Errorf("Stats = %+v: %d calls for %d Takes, want fewer calls (coalescing)", s, s.Calls, s.Groups)
	}
}

// TestSentinel reaches the master through a Sentinel URL.
func TestSentinel(t *testing.T) {
	m := redistest.Start(t)
	sen := redistest.StartSentinel(t, m)
	st, err := New(Options{URL: sen.SentinelURL(), Prefix: "sen:", Timeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("New(%q) = %v", sen.SentinelURL(), err)
	}
	defer st.Close()
	if st.Cluster() {
		t.Fatal("a Sentinel store reports cluster mode")
	}
	limit := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 2, Window: time.Hour}
	res := make([]sluice.Result, 1)
	for i, want := range []bool{true, true, false} {
		if err := st.Take(context.Background(), []sluice.Op{{Key: "s", Limit: limit, Cost: 1}}, res); err != nil {
			t.Fatal(err)
		}
		if res[0].Allowed != want {
			t.Fatalf("take %d: Allowed = %v, want %v", i, res[0].Allowed, want)
		}
	}
	if n, err := m.Do("DBSIZE"); err != nil || n != int64(1) {
		t.Fatalf("master DBSIZE = %v, %v; want 1 (the store wrote to the monitored master)", n, err)
	}
}
