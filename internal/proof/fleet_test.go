package proof

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/proof/check"
	"github.com/sluice-rl/sluice/internal/redistest"
)

// The short fault matrix: three `sluice serve --store redis` processes with
// default flags share one real redis-server; seeded clients send checks to
// all three while a fault schedule runs; every decision is recorded at the
// client (send and receive times, instance, key, rule, cost, verdict,
// degraded flag) and the history is checked offline by package check, which
// shares no code with the limiter.

// rulesYAML: one rule per bound the checker holds (all with 1 s windows, so
// a short run crosses many), keyed by descriptor key.
const rulesYAML = `domain: proof
descriptors:
  - key: fw
    rate_limit: {name: fw, algorithm: fixed_window, unit: second, requests_per_unit: 20, failure_mode: closed}
  - key: log
    rate_limit: {name: log, algorithm: sliding_log, unit: second, requests_per_unit: 10, failure_mode: closed}
  - key: gcra
    rate_limit: {name: gcra, algorithm: gcra, unit: second, requests_per_unit: 20, burst: 5, failure_mode: closed}
  - key: tb
    rate_limit: {name: tb, algorithm: token_bucket, unit: second, requests_per_unit: 20, burst: 5, failure_mode: closed}
  - key: loc
    rate_limit: {name: loc, algorithm: fixed_window, unit: second, requests_per_unit: 20, failure_mode: local}
  - key: hyb
    rate_limit: {name: hyb, algorithm: fixed_window, unit: second, requests_per_unit: 20, failure_mode: closed, placement: hybrid}
`

const replicas = 3

// contracts is what the documentation promises for those rules.
func contracts() []check.Rule {
	const sec = int64(time.Second / time.Microsecond)
	return []check.Rule{
		{Name: "fw", Kind: "window", Quota: 20, WindowUS: sec, FailureMode: "closed", PropagationUS: sec},
		{Name: "log", Kind: "log", Quota: 10, WindowUS: sec, FailureMode: "closed", PropagationUS: sec},
		{Name: "gcra", Kind: "bucket", Quota: 20, WindowUS: sec, Burst: 5, FailureMode: "closed", PropagationUS: sec},
		{Name: "tb", Kind: "bucket", Quota: 20, WindowUS: sec, Burst: 5, FailureMode: "closed", PropagationUS: sec},
		{Name: "loc", Kind: "window", Quota: 20, WindowUS: sec, FailureMode: "local", LocalShare: (20 + replicas - 1) / replicas, PropagationUS: sec},
		// placement hybrid, fixed window: never over (docs/accuracy.md).
		{Name: "hyb", Kind: "window", Quota: 20, WindowUS: sec, FailureMode: "closed", PropagationUS: sec},
	}
}

// fault is one step of a schedule: at offset At into the run, do.
type fault struct {
	At   time.Duration
	Name string
	Do   func(f *fleet) error
}

type fleet struct {
	redis *redistest.Server
	proxy *redistest.Proxy // between the instances and Redis: latency faults
	procs []*exec.Cmd
	http  []string // base URLs of the instances
	token string

	mu     sync.Mutex
	resets []check.Reset
}

// reset resets one key of one rule through instance 0's admin API and
// records when it was sent and answered.
func (f *fleet) reset(rule, key string) error {
	body := fmt.Sprintf(`{"domain":"proof","descriptor":[{"key":%q,"value":%q}]}`, rule, key)
	req, err := http.NewRequest(http.MethodPost, f.http[0]+"/admin/v1/reset", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+f.token)
	req.Header.Set("Content-Type", "application/json")
	r := check.Reset{Rule: rule, Key: key, Send: time.Now().UnixMicro()}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	r.Recv = time.Now().UnixMicro()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("reset: %s", resp.Status)
	}
	f.mu.Lock()
	f.resets = append(f.resets, r)
	f.mu.Unlock()
	return nil
}

func TestShortFaultMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("a fleet run of real processes; skipped with -short")
	}
	bin := buildSluice(t)
	schedules := []struct {
		name   string
		faults []fault
	}{
		{"no fault", nil},
		{"redis SIGSTOP 1.5s", []fault{
			{At: 1500 * time.Millisecond, Name: "SIGSTOP redis", Do: func(f *fleet) error { f.redis.Pause(); return nil }},
			{At: 3 * time.Second, Name: "SIGCONT redis", Do: func(f *fleet) error { f.redis.Resume(); return nil }},
		}},
		{"redis killed and restarted", []fault{
			{At: 1500 * time.Millisecond, Name: "kill redis", Do: func(f *fleet) error { f.redis.Kill(); return nil }},
			{At: 2500 * time.Millisecond, Name: "restart redis", Do: func(f *fleet) error { f.redis.Restart(); return nil }},
		}},
		{"replies 1.5s late", []fault{
			{At: 1500 * time.Millisecond, Name: "hold replies 1.5s", Do: func(f *fleet) error { f.proxy.SetReplyDelay(1500 * time.Millisecond); return nil }},
			{At: 3 * time.Second, Name: "release replies", Do: func(f *fleet) error { f.proxy.SetReplyDelay(0); return nil }},
		}},
		{"instance killed", []fault{
			{At: 2 * time.Second, Name: "SIGKILL instance 2", Do: func(f *fleet) error { return f.procs[2].Process.Kill() }},
		}},
		{"resets during traffic", []fault{
			{At: 1200 * time.Millisecond, Name: "reset fw u0", Do: func(f *fleet) error { return f.reset("fw", "u0") }},
			{At: 2200 * time.Millisecond, Name: "reset log u1", Do: func(f *fleet) error { return f.reset("log", "u1") }},
			{At: 3200 * time.Millisecond, Name: "reset gcra u0", Do: func(f *fleet) error { return f.reset("gcra", "u0") }},
		}},
	}
	var matrix []row
	for i, sc := range schedules {
		t.Run(sc.name, func(t *testing.T) {
			f := startFleet(t, bin)
			h, log := runTraffic(t, f, uint64(1000+i), 4*time.Second, sc.faults)
			h.Resets = f.resets
			rep := check.Check(h)
			matrix = append(matrix, row{sc.name, rep})
			writeHistory(t, sc.name, h)
			t.Logf("%s\nfaults: %s", rep.Summary(), strings.Join(log, "; "))
			for _, v := range rep.Violations {
				t.Errorf("%s", v)
			}
			// Not vacuous: the run must have reached every rule's limit.
			denied := map[string]int{}
			for _, e := range h.Events {
				if e.Verdict == check.Denied {
					denied[e.Rule]++
				}
			}
			for _, r := range h.Rules {
				if denied[r.Name] == 0 {
					t.Errorf("rule %s never denied: the traffic did not test its bound", r.Name)
				}
			}
			// A fault that changed nothing tested nothing: some decisions
			// must have been made by a failure mode.
			degraded := map[string]int{}
			for _, e := range h.Events {
				if e.Degraded != "" {
					degraded[e.Degraded]++
				}
			}
			t.Logf("degraded decisions: %v", degraded)
			if len(sc.faults) > 0 && len(degraded) == 0 && sc.name != "resets during traffic" && sc.name != "instance killed" {
				t.Errorf("no decision was degraded under %q: the fault did not reach the fleet", sc.name)
			}
		})
	}
	table := matrixTable(matrix, contracts())
	t.Logf("fault matrix (admitted / bound in the worst span of each rule):\n%s", table)
	if dir := os.Getenv("SLUICE_PROOF_DIR"); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, "matrix.md"), []byte(table), 0o644); err != nil {
			t.Error(err)
		}
	}
}

type row struct {
	schedule string
	rep      check.Report
}

// matrixTable renders the matrix: a row per fault schedule, a column per
// rule, each cell the worst span seen against its bound.
func matrixTable(rows []row, rules []check.Rule) string {
	var b strings.Builder
	b.WriteString("| fault |")
	for _, r := range rules {
		fmt.Fprintf(&b, " %s (%s) |", r.Name, r.Kind)
	}
	b.WriteString(" result |\n|---|")
	for range rules {
		b.WriteString("---|")
	}
	b.WriteString("---|\n")
	for _, rw := range rows {
		fmt.Fprintf(&b, "| %s |", rw.schedule)
		for _, r := range rules {
			w := rw.rep.Worst[r.Name]
			fmt.Fprintf(&b, " %d / %d |", w.Admitted, w.Bound)
		}
		verdict := "PASS"
		if !rw.rep.OK() {
			verdict = fmt.Sprintf("FAIL (%d)", len(rw.rep.Violations))
		}
		fmt.Fprintf(&b, " %s |\n", verdict)
	}
	return b.String()
}

// runTraffic drives seeded checks at the fleet for d while the faults run,
// and returns the recorded history.
func runTraffic(t *testing.T, f *fleet, seed uint64, d time.Duration, faults []fault) (check.History, []string) {
	t.Helper()
	h := check.History{Rules: contracts()}
	var mu sync.Mutex
	var flog []string
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, ft := range faults {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(start.Add(ft.At))):
			}
			err := ft.Do(f)
			mu.Lock()
			flog = append(flog, fmt.Sprintf("%s at %v (err %v)", ft.Name, time.Since(start).Round(time.Millisecond), err))
			mu.Unlock()
		}
	}()
	keys := []string{"fw", "log", "gcra", "tb", "loc", "hyb"}
	client := &http.Client{Timeout: 5 * time.Second}
	const clients = 6
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(c)))
			for ctx.Err() == nil {
				rule := keys[rng.IntN(len(keys))]
				key := fmt.Sprintf("u%d", rng.IntN(2))
				inst := rng.IntN(len(f.http))
				e := check.Event{Client: c, Instance: inst, Key: key, Rule: rule, Cost: 1}
				body := fmt.Sprintf(`{"domain":"proof","descriptors":[{"entries":[{"key":%q,"value":%q}]}]}`, rule, key)
				e.Send = time.Now().UnixMicro()
				resp, err := client.Post(f.http[inst]+"/v1/check", "application/json", strings.NewReader(body))
				if err != nil {
					e.Verdict = check.Timeout
				} else {
					var cr struct {
						Allowed  bool
						Statuses []struct{ Degraded string }
					}
					derr := json.NewDecoder(resp.Body).Decode(&cr)
					resp.Body.Close()
					e.Recv = time.Now().UnixMicro()
					switch {
					case derr != nil || resp.StatusCode != 200 && resp.StatusCode != 429:
						e.Verdict = check.Error
					case cr.Allowed:
						e.Verdict = check.Allowed
					default:
						e.Verdict = check.Denied
					}
					if len(cr.Statuses) == 1 {
						e.Degraded = cr.Statuses[0].Degraded
					}
				}
				mu.Lock()
				h.Events = append(h.Events, e)
				mu.Unlock()
				time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	return h, flog
}

func startFleet(t *testing.T, bin string) *fleet {
	t.Helper()
	f := &fleet{redis: redistest.Start(t), token: fmt.Sprintf("proof-%d", time.Now().UnixNano())}
	f.proxy = redistest.StartProxy(t, f.redis.Addr())
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("ops rw "+f.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rules := filepath.Join(dir, "rules")
	if err := os.Mkdir(rules, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rules, "proof.yaml"), []byte(rulesYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range replicas {
		grpcAddr, httpAddr := freeAddr(t), freeAddr(t)
		cmd := exec.Command(bin, "serve", "--store", "redis", "--redis-url", f.proxy.URL(), "--rules", rules, "--admin-token-file", tokens,
			"--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--debug-addr", "off",
			"--expected-replicas", fmt.Sprint(replicas), "--log-level", "warn")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("instance %d log:\n%s", i, out.String())
			}
		})
		base := "http://" + httpAddr
		waitReady(t, base+"/healthz")
		f.http = append(f.http, base)
		f.procs = append(f.procs, cmd)
	}
	return f
}

func waitReady(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready within 60s: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func buildSluice(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sluice")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/sluice-rl/sluice/cmd/sluice")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// writeHistory keeps the history for a rerun of the checker: in
// $SLUICE_PROOF_DIR when set, else in the test's temporary directory.
func writeHistory(t *testing.T, name string, h check.History) {
	t.Helper()
	dir := os.Getenv("SLUICE_PROOF_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, strings.NewReplacer(" ", "_", ".", "_").Replace(name)+".json")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
