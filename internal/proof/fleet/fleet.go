// Package fleet runs Sluice as deployed — three `sluice serve` processes
// sharing a real Redis (a single node behind a TCP proxy, a three-master
// Cluster, or a master, a replica and a Sentinel), with real PostgreSQL
// for tenants when a schedule needs it — under seeded traffic from several
// clients and a fault schedule, and records every decision at the clients
// as a check.History. Package check then holds the history to the
// documented bounds; this package never judges a decision itself.
//
// The short matrix is TestShortFaultMatrix (internal/proof); the full one
// is `sluice-bench proof --seed N --out DIR`. Both call Run once per
// Schedule. Run takes a testing.TB: a test passes its *testing.T, a program
// wraps its run in Program.
package fleet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/pgtest"
	"github.com/sluice-rl/sluice/internal/proctest"
	"github.com/sluice-rl/sluice/internal/proof/check"
	"github.com/sluice-rl/sluice/internal/redistest"
)

// PartitionedInstance is the instance a Partition schedule runs in a
// network namespace.
const PartitionedInstance = 1

// Replicas is how many `sluice serve` processes a run starts.
const Replicas = 3

// SkewedInstance is the instance whose clock a Schedule's Skew moves.
const SkewedInstance = 2

// rulesYAML: one rule per bound the checker holds (all with 1 s windows, so
// a short run crosses many), keyed by descriptor key. fwQuota is the fixed
// window's quota; a reload rewrites it.
const rulesYAML = `domain: proof
descriptors:
  - key: fw
    rate_limit: {name: fw, algorithm: fixed_window, unit: second, requests_per_unit: %d, failure_mode: closed}
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
  - key: sw
    rate_limit: {name: sw, algorithm: sliding_window, unit: second, requests_per_unit: 20, failure_mode: closed}
  - key: lb
    rate_limit: {name: lb, algorithm: leaky_bucket, unit: second, requests_per_unit: 20, burst: 5, failure_mode: closed}
  - key: conc
    rate_limit: {name: conc, algorithm: concurrency, unit: second, requests_per_unit: 5, failure_mode: closed}
  - key: hgcra
    rate_limit: {name: hgcra, algorithm: gcra, unit: second, requests_per_unit: 20, burst: 8, failure_mode: closed, placement: hybrid}
  - key: htb
    rate_limit: {name: htb, algorithm: token_bucket, unit: second, requests_per_unit: 20, burst: 8, failure_mode: closed, placement: hybrid}
`

// tenantsYAML: a tenant-keyed rule whose free tier is 20/s (tenant acme
// gets an override of 10/s in PostgreSQL: overrideQuota), and below it an
// hourly quota (hourlyQuota) whose hour is longer than a reset takes to
// reach every instance, so a denial after a tenant reset can contradict it.
const tenantsYAML = `domain: prooft
tenant_key: tenant
descriptors:
  - key: tenant
    rate_limit: {name: ten, algorithm: fixed_window, unit: second, requests_per_unit: 20, failure_mode: closed}
    descriptors:
      - key: quota
        value: hourly
        rate_limit: {name: hourly, algorithm: fixed_window, unit: hour, requests_per_unit: 600, failure_mode: closed}
`

// llmYAML: two budgets charged by reservations settled at stream end,
// paired by the request ID (docs/llm.md), keyed by the API key: "mt"
// whose clients reserve max_tokens (what a request can never exceed) and
// "est" whose clients reserve an estimate that a request may exceed by
// half. 1 s windows, so a short run crosses many.
const llmYAML = `domain: prooflm
descriptors:
  - key: mt
    descriptors:
      - key: request_id
        rate_limit: {name: mt, algorithm: fixed_window, unit: second, requests_per_unit: %[1]d, failure_mode: closed, settle: reserve, pair_by: request_id, settle_within: 1m}
  - key: est
    descriptors:
      - key: request_id
        rate_limit: {name: est, algorithm: fixed_window, unit: second, requests_per_unit: %[1]d, failure_mode: closed, settle: reserve, pair_by: request_id, settle_within: 1m}
`

// llmBudget is the budget per second of each LLM rule, in tokens.
const llmBudget = 2000

const (
	fwQuota       = 20
	fwReloaded    = 10  // what the reload fault sets fw to
	overrideQuota = 10  // tenant acme's override of "ten"
	hourlyQuota   = 600 // the tenant's hourly quota
	// Tenant is the tenant that has an override.
	Tenant = "acme"
)

// acmeRecord is the tenant's record: free tier, ten overridden to 10/s.
var acmeRecord = fmt.Sprintf(`{"tier":"free","overrides":[{"domain":"prooft","descriptor":"","requests_per_unit":%d,"unit":"second"}]}`, overrideQuota)

// Contracts is what the documentation promises for the rules of a run of
// s, named as the checker knows them: "acme" is rule ten for the tenant
// with the override, "hourly" that tenant's hourly quota; an LLM run's
// rules are its two budgets alone.
func Contracts(s Schedule) []check.Rule {
	const sec = int64(time.Second / time.Microsecond)
	if s.LLM {
		// What the requests admitted in one window used: at most the
		// budget, plus what they used beyond their reservation (none for
		// "mt"); docs/llm.md.
		return []check.Rule{
			{Name: "mt", Kind: "budget", Quota: llmBudget, WindowUS: sec, FailureMode: "closed", PropagationUS: sec},
			{Name: "est", Kind: "budget", Quota: llmBudget, WindowUS: sec, FailureMode: "closed", PropagationUS: sec},
		}
	}
	rs := []check.Rule{
		{Name: "fw", Kind: "window", Quota: fwQuota, WindowUS: sec, FailureMode: "closed", PropagationUS: sec},
		{Name: "log", Kind: "log", Quota: 10, WindowUS: sec, FailureMode: "closed", PropagationUS: sec},
		{Name: "gcra", Kind: "bucket", Quota: 20, WindowUS: sec, Burst: 5, FailureMode: "closed", PropagationUS: sec},
		{Name: "tb", Kind: "bucket", Quota: 20, WindowUS: sec, Burst: 5, FailureMode: "closed", PropagationUS: sec},
		{Name: "loc", Kind: "window", Quota: 20, WindowUS: sec, FailureMode: "local", LocalShare: (20 + Replicas - 1) / Replicas, PropagationUS: sec},
		// sliding_window: its estimate counts the current window whole, so
		// each epoch-aligned window holds at most the quota.
		{Name: "sw", Kind: "window", Quota: 20, WindowUS: sec, FailureMode: "closed", PropagationUS: sec},
		// leaky_bucket (a queue: admitted with a Delay while burst units of
		// work fit): burst + rate × span, as a bucket.
		{Name: "lb", Kind: "bucket", Quota: 20, WindowUS: sec, Burst: 5, FailureMode: "closed", PropagationUS: sec},
		// concurrency, never released here: each slot lives one window from
		// its decision, so any span shorter than a window holds at most the
		// limit's admissions, as a log does.
		{Name: "conc", Kind: "log", Quota: 5, WindowUS: sec, FailureMode: "closed", PropagationUS: sec},
		// placement hybrid, fixed window: never over (docs/accuracy.md).
		{Name: "hyb", Kind: "window", Quota: 20, WindowUS: sec, FailureMode: "closed", PropagationUS: sec},
		// placement hybrid, buckets: an exact bucket plus the units of
		// allotments outstanding (docs/accuracy.md, store/hybrid).
		{Name: "hgcra", Kind: "bucket", Quota: 20, WindowUS: sec, Burst: 8, Held: hybridHeld(8), FailureMode: "closed", PropagationUS: sec},
		{Name: "htb", Kind: "bucket", Quota: 20, WindowUS: sec, Burst: 8, Held: hybridHeld(8), FailureMode: "closed", PropagationUS: sec},
	}
	if s.Tenants {
		rs = append(rs,
			check.Rule{Name: "hourly", Kind: "window", Quota: hourlyQuota, WindowUS: 3600 * sec, FailureMode: "closed", PropagationUS: sec},
			check.Rule{Name: "acme", Kind: "window", Quota: overrideQuota, WindowUS: sec, FailureMode: "closed", PropagationUS: sec},
		)
	}
	return rs
}

// hybridSplit is store/hybrid's documented DefaultSplit: an allotment is at
// most 1/hybridSplit of the tokens above the reserve when granted.
const hybridSplit = 4

// hybridHeld is the allowance of a hybrid bucket of capacity burst across
// the fleet, for hits of one unit (the fleet's): an instance asks for a
// refill of a key only once fewer units than a quarter of the capacity are
// held (the wanted allotment is at most the capacity, and a refill is asked
// below a quarter of it) and has one request in flight at a time, and a
// grant is at most ⌈burst / hybridSplit⌉; so per instance at most two
// allotments' worth, held or in flight.
func hybridHeld(burst int64) int64 {
	return Replicas * 2 * ((burst + hybridSplit - 1) / hybridSplit)
}

// Fleet is one run's processes. Its methods are safe for concurrent use.
type Fleet struct {
	t TB
	// Redis is the single node (behind Proxy), or the Sentinel's first
	// master; nil for a Cluster.
	Redis *redistest.Server
	// Proxy sits between the instances and a single Redis: latency faults.
	Proxy *redistest.Proxy
	// Replica, ReplProxy (between the replica and its master: replication
	// lag) and Sentinel are set for Store "sentinel".
	Replica, Sentinel *redistest.Server
	ReplProxy         *redistest.Proxy
	// Cluster is set for Store "cluster".
	Cluster *redistest.Cluster
	// PG holds the tenants, for schedules with Tenants.
	PG *pgtest.Server
	// ns is PartitionedInstance's network namespace (Partition).
	ns *netns

	procs []*exec.Cmd
	http  []string // base URLs of the instances
	token string
	rules string // the rules file

	start  time.Time
	mu     sync.Mutex
	hist   check.History
	denied map[string]bool // rules denied by their limit so far (testsBound)
	// reqs numbers the LLM requests; settles counts their settle calls by
	// outcome: the verdict, or the degraded mode when there was one.
	reqs    int
	settles map[string]int
}

// TB is what a run needs of its caller: a test, or Program's stand-in.
type TB = testing.TB

// Schedule is one row of the matrix: a store topology and the faults
// injected into a run on it.
type Schedule struct {
	Name string
	// Store is "single" (one redis-server behind a proxy), "cluster"
	// (three masters), "cluster+replicas" (three masters with a replica
	// each) or "sentinel" (a master, a replica, a Sentinel).
	Store string
	// Tenants starts PostgreSQL, gives tenant acme an override and adds
	// tenant traffic.
	Tenants bool
	// Short puts the schedule in the short matrix (the test suite).
	Short bool
	// Degrades says the faults must make some decisions degraded (or the
	// fault did not reach the fleet and the run proves nothing).
	Degrades bool
	// Skew is how far instance SkewedInstance's clock runs ahead of the
	// others' (sluice serve --clock-skew: the clock of its in-process
	// stores, which decide failure_mode local); 0: none.
	Skew time.Duration
	// Clients, when above 0, is how many concurrent clients this schedule
	// runs, whatever Options.Clients says: the concurrent row's callers in
	// flight.
	Clients int
	// Partition runs instance PartitionedInstance in a network namespace
	// of its own (Store "single" only), reaching Redis over a veth through
	// a proxy of its own, so that Fleet.Cut can blackhole its packets to
	// Redis while its HTTP answers still come back. Needs root and
	// iproute2.
	Partition bool
	// LLM makes the traffic LLM-shaped, and the only traffic: each client
	// reserves tokens for a request (request-path check, paired by a
	// request ID), streams for a while, then settles what it used
	// (smaller or, for rule "est", larger than the estimate), or vanishes
	// without settling, or settles twice (see Fleet.llm).
	LLM bool
	// Native runs the instances with --redis-native-fixed-window and
	// --redis-native-sliding-window: their fixed_window and sliding_window
	// rules counted with native Redis counters, not scripts.
	Native bool
	// Busy keeps every core of the host busy while the traffic runs (one
	// spinning process per CPU, at nice 5), so calls queue behind other
	// work: overload must make decisions slower, never switch a limit off.
	Busy bool
	// Setup, if set, runs just before the clients start (its decisions
	// are part of the history).
	Setup func(f *Fleet) error
	// Duration of the traffic; 0 means 4 s. Traffic goes on while a fault
	// still runs, and after, to the rules not denied yet (Run).
	Duration time.Duration
	Faults   []Fault
}

// Fault is one step of a schedule: at offset At into the traffic, Do.
type Fault struct {
	At   time.Duration
	Name string
	Do   func(f *Fleet) error
}

// Result is one schedule's run.
type Result struct {
	Schedule Schedule
	History  check.History
	Report   check.Report
	// Log says when each fault ran and how it ended.
	Log []string
	// Degraded counts decisions by degraded mode; Denied counts, by rule,
	// denials by the rule's limit (decided by the store or by an
	// instance's local share, not by a failure policy): a rule never
	// denied so was never tested.
	Degraded, Denied map[string]int
}

// Problems lists why a run proves less than it should, beside the
// checker's violations: a rule never driven to a denial, a fault that
// could not be injected, or one that degraded no decision when it should.
func (r Result) Problems() []string {
	var out []string
	for _, c := range r.History.Rules {
		if r.Denied[c.Name] == 0 {
			var n, admitted int
			for _, e := range r.History.Events {
				if e.Rule == c.Name {
					n++
					if e.Verdict == check.Allowed {
						admitted++
					}
				}
			}
			out = append(out, fmt.Sprintf("rule %s never denied in %d decisions (%d admitted): the traffic did not test its bound", c.Name, n, admitted))
		}
	}
	for _, l := range r.Log {
		if strings.Contains(l, ": FAILED: ") {
			out = append(out, "fault "+l)
		}
	}
	if r.Schedule.Degrades && len(r.Degraded) == 0 {
		out = append(out, fmt.Sprintf("no decision was degraded under %q: the fault did not reach the fleet", r.Schedule.Name))
	}
	return out
}

// Options configure Run.
type Options struct {
	// Bin is the sluice binary (Build).
	Bin string
	// Seed seeds the clients' traffic (each schedule adds its index).
	Seed uint64
	// Clients is how many concurrent clients send checks; 0 means 6.
	Clients int
	// Logf, if set, receives progress lines.
	Logf func(format string, args ...any)
}

// Run starts a fleet for s, drives seeded traffic at it while the faults
// run (and after, until every rule has been denied by its limit, for at
// most MaxExtra), and returns the history and the checker's report. Everything it
// starts is stopped by t's cleanups.
func Run(t TB, o Options, s Schedule) Result {
	t.Helper()
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	began := time.Now()
	f := start(t, o.Bin, s)
	logf("  fleet up (%s Redis%s) in %v", s.Store, map[bool]string{true: ", PostgreSQL", false: ""}[s.Tenants], time.Since(began).Round(100*time.Millisecond))
	d := s.Duration
	if d == 0 {
		d = 4 * time.Second
	}
	clients := o.Clients
	if s.Clients > 0 {
		clients = s.Clients
	}
	if clients == 0 {
		clients = 6
	}
	if s.Busy {
		stop := busy(t, runtime.NumCPU())
		logf("  %d cores kept busy by spinning processes", runtime.NumCPU())
		defer stop()
	}
	log := f.traffic(o.Seed, clients, d, s, logf)
	if s.LLM {
		f.mu.Lock()
		line := fmt.Sprintf("LLM requests %d; settle calls by outcome %v", f.reqs, f.settles)
		f.mu.Unlock()
		logf("  %s", line)
		log = append(log, line)
	}
	h := f.history()
	h.Rules = Contracts(s)
	rep := check.Check(h)
	res := Result{Schedule: s, History: h, Report: rep, Log: log, Degraded: map[string]int{}, Denied: map[string]int{}}
	for _, e := range h.Events {
		if testsBound(e) {
			res.Denied[e.Rule]++
		}
		if e.Degraded != "" {
			res.Degraded[e.Degraded]++
		}
	}
	// An LLM run's settles are not decisions, but a settle the fault
	// reached (degraded, timed out, failed) shows the fault reached the
	// fleet as much as a degraded decision does.
	f.mu.Lock()
	for outcome, n := range f.settles {
		if outcome != check.Allowed {
			res.Degraded["settle "+outcome] += n
		}
	}
	f.mu.Unlock()
	verdict := "PASS"
	if !rep.OK() {
		verdict = fmt.Sprintf("FAIL (%d violations)", len(rep.Violations))
	}
	logf("  %d decisions checked: %s; degraded %v", rep.Events, verdict, res.Degraded)
	return res
}

func (f *Fleet) history() check.History {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := f.hist
	h.Events = append([]check.Event(nil), h.Events...)
	return h
}

// busy starts n processes that spin until the returned stop is called (or
// t's cleanups run).
func busy(t TB, n int) (stop func()) {
	var cmds []*exec.Cmd
	for range n {
		// nice 5: they take every idle cycle and a share of each core
		// from the fleet, so its calls queue, but a test of another
		// package running beside it (go test runs packages in parallel)
		// keeps most of its share.
		c := exec.Command("nice", "-n", "5", "sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			t.Fatalf("fleet: start a spinning process: %v", err)
		}
		cmds = append(cmds, c)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			for _, c := range cmds {
				_ = c.Process.Kill()
				_ = c.Wait()
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// now is µs on the shared clock.
func now() int64 { return time.Now().UnixMicro() }

// Record adds a fault to the history as the operator saw it.
func (f *Fleet) Record(name, kind string, start, end int64) {
	f.mu.Lock()
	f.hist.Faults = append(f.hist.Faults, check.Fault{Name: name, Kind: kind, Start: start, End: end})
	f.mu.Unlock()
}

// Reset resets one key of one rule (checker's name) through instance 0's
// admin API and records when it was sent and answered. Rule "acme" resets
// the tenant: every counter of it, recorded for "acme" and "hourly".
func (f *Fleet) Reset(rule, key string) error {
	body := fmt.Sprintf(`{"domain":"proof","descriptor":[{"key":%q,"value":%q}]}`, rule, key)
	if rule == "acme" {
		body = fmt.Sprintf(`{"tenant":%q}`, key)
	}
	r := check.Reset{Rule: rule, Key: key, Send: now()}
	if err := f.admin(http.MethodPost, "/admin/v1/reset", body); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	r.Recv = now()
	f.mu.Lock()
	f.hist.Resets = append(f.hist.Resets, r)
	if rule == "acme" { // every counter of the tenant
		h := r
		h.Rule = "hourly"
		f.hist.Resets = append(f.hist.Resets, h)
	}
	f.mu.Unlock()
	f.Record("reset "+rule+" "+key, "reset", r.Send, r.Recv)
	return nil
}

func (f *Fleet) admin(method, path, body string) error {
	req, err := http.NewRequest(method, f.http[0]+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+f.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(b.String()))
	}
	return nil
}

// Reload rewrites the rules file with fw's quota set to quota, at the
// middle of a window (the next x.5 s on the clock), and records the change
// from the write until every instance answers with the new limit.
func (f *Fleet) Reload(quota int) error {
	next := time.Now().Truncate(time.Second).Add(1500 * time.Millisecond)
	time.Sleep(time.Until(next))
	c := check.Change{Rule: "fw", Quota: int64(quota), Send: now()}
	if err := writeFile(f.rules, fmt.Sprintf(rulesYAML, quota)); err != nil {
		return err
	}
	for i := range f.http {
		if err := f.waitLimit(i, "proof", "fw", "probe", quota, 10*time.Second); err != nil {
			return err
		}
	}
	c.Recv = now()
	f.mu.Lock()
	f.hist.Changes = append(f.hist.Changes, c)
	f.mu.Unlock()
	f.Record(fmt.Sprintf("reload fw %d→%d", fwQuota, quota), "reload", c.Send, c.Recv)
	return nil
}

// waitLimit polls instance i with zero-cost checks until the limit that
// applies to key=value is quota.
func (f *Fleet) waitLimit(i int, domain, key, value string, quota int, d time.Duration) error {
	body := fmt.Sprintf(`{"domain":%q,"descriptors":[{"entries":[{"key":%q,"value":%q}]}],"hits":0}`, domain, key, value)
	deadline := time.Now().Add(d)
	var got int
	for time.Now().Before(deadline) {
		resp, err := http.Post(f.http[i]+"/v1/check", "application/json", strings.NewReader(body))
		if err == nil {
			var cr struct {
				Statuses []struct {
					Limit *struct {
						RequestsPerUnit int `json:"requests_per_unit"`
					}
				}
			}
			_ = json.NewDecoder(resp.Body).Decode(&cr)
			resp.Body.Close()
			if len(cr.Statuses) == 1 && cr.Statuses[0].Limit != nil {
				if got = cr.Statuses[0].Limit.RequestsPerUnit; got == quota {
					return nil
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("instance %d: %s %s=%s: limit %d, want %d after %v", i, domain, key, value, got, quota, d)
}

// SpendHourly spends the tenant's whole hourly quota in one check (cost
// hourlyQuota) through instance 0, recorded as a client's decision like
// any other (client -1), so that the hour is denied until a reset.
func (f *Fleet) SpendHourly() error {
	body := fmt.Sprintf(`{"domain":"prooft","descriptors":[{"entries":[{"key":"tenant","value":%q},{"key":"quota","value":"hourly"}]}],"hits":%d}`, Tenant, hourlyQuota)
	e := check.Event{Client: -1, Instance: 0, Key: Tenant, Rule: "hourly", Cost: hourlyQuota, Send: now()}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Post(f.http[0]+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		e.Verdict = check.Timeout
	} else {
		record(resp, &e)
	}
	f.mu.Lock()
	f.hist.Events = append(f.hist.Events, e)
	f.mu.Unlock()
	if e.Verdict != check.Allowed {
		return fmt.Errorf("spend the hourly quota: %s", e.Verdict)
	}
	return nil
}

// Kill SIGKILLs instance i.
func (f *Fleet) Kill(i int) error { return f.procs[i].Process.Kill() }

// Failover forces a Sentinel failover (SENTINEL FAILOVER: the replica is
// promoted with whatever it has received) and waits until the old master
// has been turned into a replica: until then both may take writes, and the
// old master's are lost. Recorded as a "loss" from the command to that.
func (f *Fleet) Failover() error {
	start := now()
	if _, err := f.Sentinel.Do("SENTINEL", "FAILOVER", "mymaster"); err != nil {
		return fmt.Errorf("sentinel failover: %w", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := f.Redis.Do("ROLE")
		if a, ok := r.([]any); err == nil && ok && len(a) > 0 && a[0] == "slave" {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("old master not demoted within 30s (ROLE %v, %v)", r, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.Record("sentinel failover", "loss", start, now())
	return nil
}

// KillMaster SIGKILLs master i of a Cluster with replicas and waits until
// a replica has been promoted in its place. A replica lacks the writes it
// had not received: recorded as a "loss" from the kill to the promotion.
func (f *Fleet) KillMaster(i int) error {
	start := now()
	f.Cluster.Servers[i].Kill()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, r := range f.Cluster.Replicas {
			v, err := r.Do("ROLE")
			if a, ok := v.([]any); err == nil && ok && len(a) > 0 && a[0] == "master" {
				f.Record(fmt.Sprintf("cluster master %d killed, replica %s promoted", i, r.Addr()), "loss", start, now())
				return nil
			}
		}
		if time.Now().After(deadline) {
			f.Record(fmt.Sprintf("cluster master %d killed, no replica promoted", i), "loss", start, now())
			return fmt.Errorf("no replica promoted within 30s of killing master %d", i)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Cut routes every packet from PartitionedInstance to Redis into a
// blackhole for d (a partition: its calls on open connections time out, a
// new connection fails; its HTTP answers still come back), then routes
// them to Redis again.
func (f *Fleet) Cut(d time.Duration) error {
	if f.ns == nil {
		return errors.New("fleet: Cut needs a Partition schedule")
	}
	start := now()
	if err := f.ns.Cut(); err != nil {
		return err
	}
	time.Sleep(d)
	err := f.ns.Heal()
	f.Record(fmt.Sprintf("instance %d cut from Redis", PartitionedInstance), "network", start, now())
	return err
}

// Full makes the single Redis refuse every write for d: maxmemory below
// what it uses, under noeviction (what store/redis requires), then back.
func (f *Fleet) Full(d time.Duration) error {
	start := now()
	for _, kv := range [][2]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", "1"}} {
		if _, err := f.Redis.Do("CONFIG", "SET", kv[0], kv[1]); err != nil {
			return fmt.Errorf("CONFIG SET %s: %w", kv[0], err)
		}
	}
	time.Sleep(d)
	_, err := f.Redis.Do("CONFIG", "SET", "maxmemory", "0")
	f.Record("Redis full (maxmemory, noeviction)", "full", start, now())
	if err != nil {
		return fmt.Errorf("CONFIG SET maxmemory 0: %w", err)
	}
	return nil
}

func start(t TB, bin string, s Schedule) *Fleet {
	t.Helper()
	f := &Fleet{t: t, token: fmt.Sprintf("proof-%d", time.Now().UnixNano()), settles: map[string]int{}}
	var url string
	switch s.Store {
	case "single", "":
		f.Redis = redistest.Start(t)
		f.Proxy = redistest.StartProxy(t, f.Redis.Addr())
		url = f.Proxy.URL()
	case "cluster":
		f.Cluster = redistest.StartCluster(t)
		url = f.Cluster.URL()
	case "cluster+replicas":
		f.Cluster = redistest.StartClusterWith(t, redistest.ClusterOptions{Replicas: 1})
		url = f.Cluster.URL()
	case "sentinel":
		f.Redis = redistest.Start(t)
		f.Replica = redistest.Start(t)
		f.ReplProxy = redistest.StartProxy(t, f.Redis.Addr())
		host, port, _ := net.SplitHostPort(f.ReplProxy.Addr())
		if _, err := f.Replica.Do("REPLICAOF", host, port); err != nil {
			t.Fatalf("fleet: REPLICAOF: %v", err)
		}
		waitFor(t, "replica in sync", func() bool {
			r, err := f.Replica.Do("INFO", "replication")
			s, _ := r.(string)
			return err == nil && strings.Contains(s, "master_link_status:up")
		})
		f.Sentinel = redistest.StartSentinel(t, f.Redis)
		waitFor(t, "sentinel sees the replica", func() bool {
			r, err := f.Sentinel.Do("SENTINEL", "REPLICAS", "mymaster")
			a, _ := r.([]any)
			return err == nil && len(a) > 0
		})
		url = f.Sentinel.SentinelURL()
	default:
		t.Fatalf("fleet: unknown store %q", s.Store)
	}
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("ops rw "+f.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rules := filepath.Join(dir, "rules")
	if err := os.Mkdir(rules, 0o755); err != nil {
		t.Fatal(err)
	}
	f.rules = filepath.Join(rules, "proof.yaml")
	if err := writeFile(f.rules, fmt.Sprintf(rulesYAML, fwQuota)); err != nil {
		t.Fatal(err)
	}
	if s.LLM {
		if err := writeFile(filepath.Join(rules, "llm.yaml"), fmt.Sprintf(llmYAML, llmBudget)); err != nil {
			t.Fatal(err)
		}
	}
	var pgURL string
	if s.Tenants {
		if err := writeFile(filepath.Join(rules, "tenants.yaml"), tenantsYAML); err != nil {
			t.Fatal(err)
		}
		f.PG = pgtest.Start(t)
		pgURL = f.PG.NewDatabase(t)
	}
	if s.Partition {
		if f.Redis == nil || f.Cluster != nil || s.Store != "single" {
			t.Fatalf("fleet: Partition needs Store single")
		}
		f.ns = newNetns(t)
		p := redistest.StartProxyOn(t, f.ns.redisHost, f.Redis.Addr())
		_, f.ns.redisPort, _ = net.SplitHostPort(p.Addr())
	}
	for i := range Replicas {
		grpcAddr, httpAddr := freeAddr(t), freeAddr(t)
		url := url
		inNS := f.ns != nil && i == PartitionedInstance
		if inNS {
			grpcAddr, httpAddr = f.ns.addr(8081), f.ns.addr(8080)
			url = "redis://" + net.JoinHostPort(f.ns.redisHost, f.ns.redisPort) + "/0"
		}
		args := []string{"serve", "--store", "redis", "--redis-url", url, "--rules", rules, "--admin-token-file", tokens,
			"--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--debug-addr", "off",
			"--expected-replicas", fmt.Sprint(Replicas), "--log-level", "warn", "--debug-decision-instant"}
		if s.Native {
			args = append(args, "--redis-native-fixed-window", "--redis-native-sliding-window")
		}
		if s.Skew != 0 && i == SkewedInstance {
			args = append(args, "--clock-skew", s.Skew.String())
		}
		if pgURL != "" {
			args = append(args, "--migrate", "--tenant-snapshot", filepath.Join(dir, fmt.Sprintf("snapshot-%d", i)))
		}
		cmd := exec.Command(bin, args...)
		if inNS {
			cmd = f.ns.command(bin, args...) // ip netns exec: the same process, in the namespace
		}
		if pgURL != "" {
			cmd.Env = append(os.Environ(), "SLUICE_POSTGRES_URL="+pgURL)
		}
		var out syncBuffer
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
	if s.Tenants {
		if err := f.admin(http.MethodPut, "/admin/v1/quotas/"+Tenant, acmeRecord); err != nil {
			t.Fatalf("fleet: give %s its override: %v", Tenant, err)
		}
		for i := range f.http {
			if err := f.waitLimit(i, "prooft", "tenant", Tenant, overrideQuota, 30*time.Second); err != nil {
				t.Fatalf("fleet: %v", err)
			}
		}
	}
	return f
}

// MaxExtra caps how long traffic goes on after a schedule's Duration (and
// its faults) to drive every rule to a denial.
const MaxExtra = 30 * time.Second

// traffic drives seeded checks at the fleet for d while the faults run,
// recording every decision. Then, once every fault has run, it goes on
// until every rule has been denied at least once (a rule never denied is
// a bound never tested), sending only to the rules not denied yet, for at
// most MaxExtra: on a loaded host the first d may be too thin to reach
// every limit. A rule still never denied then is a Problem of the run.
func (f *Fleet) traffic(seed uint64, clients int, d time.Duration, s Schedule, logf func(string, ...any)) []string {
	var mu sync.Mutex
	var flog []string
	f.start = time.Now()
	clock := -1
	if s.Skew != 0 {
		f.Record(fmt.Sprintf("instance %d clock %v ahead", SkewedInstance, s.Skew), "clock", f.start.UnixMicro(), f.start.Add(d).UnixMicro())
		f.mu.Lock()
		clock = len(f.hist.Faults) - 1
		c := &f.hist.Faults[clock]
		c.Instance, c.OffsetUS = SkewedInstance, s.Skew.Microseconds()
		f.mu.Unlock()
	}
	if s.Setup != nil {
		line := "setup"
		if err := s.Setup(f); err != nil {
			line += fmt.Sprintf(": FAILED: %v", err)
		}
		logf("  %s", line)
		flog = append(flog, line)
	}
	keys := []string{"fw", "log", "gcra", "tb", "sw", "lb", "conc", "loc", "hyb", "hgcra", "htb"}
	if s.Tenants {
		keys = append(keys, "hourly", "acme")
	}
	if s.LLM {
		keys = []string{"mt", "est"}
	}
	// The traffic's end: d has passed, every fault has run and every rule
	// has been denied; or d + MaxExtra has passed.
	var faultsDone sync.WaitGroup
	faultsDone.Add(1)
	done := make(chan struct{})
	var once sync.Once
	finish := func() { once.Do(func() { close(done) }) }
	hard := time.AfterFunc(d+MaxExtra, finish)
	defer hard.Stop()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer faultsDone.Done()
		for _, ft := range s.Faults {
			select {
			case <-done:
				return
			case <-time.After(time.Until(f.start.Add(ft.At))):
			}
			at := time.Since(f.start)
			err := ft.Do(f)
			line := fmt.Sprintf("%s at %v (took %v)", ft.Name, at.Round(time.Millisecond), (time.Since(f.start) - at).Round(time.Millisecond))
			if err != nil {
				line += fmt.Sprintf(": FAILED: %v", err)
			}
			logf("  %s", line)
			mu.Lock()
			flog = append(flog, line)
			mu.Unlock()
		}
	}()
	// extra: closed once d has passed and every fault has run; from then
	// on clients send only to the rules not denied yet.
	f.mu.Lock()
	f.denied = map[string]bool{}
	for _, e := range f.hist.Events { // the setup's
		f.denied[e.Rule] = f.denied[e.Rule] || testsBound(e)
	}
	f.mu.Unlock()
	pending := func() []string { // under f.mu
		var out []string
		for _, k := range keys {
			if !f.denied[k] {
				out = append(out, k)
			}
		}
		return out
	}
	extra := make(chan struct{})
	var short []string // the rules not denied when extra closed
	go func() {
		faultsDone.Wait()
		select {
		case <-time.After(time.Until(f.start.Add(d))):
		case <-done:
		}
		f.mu.Lock()
		short = pending()
		f.mu.Unlock()
		close(extra)
	}()
	// One idle connection per client and instance: the default of two per
	// host would make the clients dial anew all the time.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = clients
	client := &http.Client{Timeout: 5 * time.Second, Transport: tr}
	defer tr.CloseIdleConnections()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(c)))
			for {
				select {
				case <-done:
					return
				default:
				}
				rule := keys[rng.IntN(len(keys))]
				select {
				case <-extra:
					f.mu.Lock()
					p := pending()
					f.mu.Unlock()
					if len(p) == 0 {
						finish()
						return
					}
					rule = p[rng.IntN(len(p))]
				default:
				}
				if s.LLM {
					f.llm(client, c, rng, rule)
				} else {
					f.check(client, c, rng, rule)
				}
				time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	end := time.Now()
	<-extra
	if len(short) > 0 {
		f.mu.Lock()
		p := pending()
		f.mu.Unlock()
		line := fmt.Sprintf("traffic went on %v after the schedule, to the rules not denied yet (%s)", end.Sub(f.start.Add(d)).Round(time.Millisecond), strings.Join(short, ", "))
		if len(p) > 0 {
			line += fmt.Sprintf("; still never denied after %v more: %s", MaxExtra, strings.Join(p, ", "))
		}
		logf("  %s", line)
		flog = append(flog, line)
	}
	if clock >= 0 {
		f.mu.Lock()
		f.hist.Faults[clock].End = end.UnixMicro()
		f.mu.Unlock()
	}
	return flog
}

// check sends one check of rule from client c to a random instance and
// records the decision.
func (f *Fleet) check(client *http.Client, c int, rng *rand.Rand, rule string) {
	key := fmt.Sprintf("u%d", rng.IntN(2))
	inst := rng.IntN(len(f.http))
	body := fmt.Sprintf(`{"domain":"proof","descriptors":[{"entries":[{"key":%q,"value":%q}]}]}`, rule, key)
	switch rule {
	case "hourly":
		key = Tenant
		body = fmt.Sprintf(`{"domain":"prooft","descriptors":[{"entries":[{"key":"tenant","value":%q},{"key":"quota","value":"hourly"}]}]}`, key)
	case "acme":
		key = Tenant
		body = fmt.Sprintf(`{"domain":"prooft","descriptors":[{"entries":[{"key":"tenant","value":%q}]}]}`, key)
	}
	e := check.Event{Client: c, Instance: inst, Key: key, Rule: rule, Cost: 1}
	e.Send = now()
	resp, err := client.Post(f.http[inst]+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		e.Verdict = check.Timeout
	} else {
		record(resp, &e)
	}
	f.record(e)
}

// llm is one LLM request of client c against budget rule ("mt" or "est"):
// it reserves tokens on a random instance (the request-path check, hits r,
// paired by a request ID), and, admitted, streams for up to 300 ms and
// then, as Envoy's stream-done call does, sends the same descriptor with
// what it used, to a random instance; one request in ten vanishes instead
// (its client gone: no settle, having used up to r), one in ten settles
// twice. Under "mt" a request uses at most r (r is max_tokens; half of
// them all of it); under "est" between r/2 and 3r/2. The reservation is the recorded decision,
// its Use what the request used; settles are not decisions (never denied)
// and are counted in f.settles.
func (f *Fleet) llm(client *http.Client, c int, rng *rand.Rand, rule string) {
	key := fmt.Sprintf("k%d", rng.IntN(2))
	r := int64(20 + rng.IntN(281))
	f.mu.Lock()
	f.reqs++
	id := fmt.Sprintf("c%d-%d", c, f.reqs)
	f.mu.Unlock()
	body := func(hits int64) string {
		return fmt.Sprintf(`{"domain":"prooflm","descriptors":[{"entries":[{"key":%q,"value":%q},{"key":"request_id","value":%q}],"hits":%d}]}`, rule, key, id, hits)
	}
	inst := rng.IntN(len(f.http))
	e := check.Event{Client: c, Instance: inst, Key: key, Rule: rule, Cost: r}
	use := int64(rng.IntN(int(r) + 1)) // ≤ r: max_tokens, or a stream cut short
	if rng.IntN(2) == 0 {
		use = r // half use all of it: spend near the budget tests the bound
	}
	if rule == "est" {
		use = r/2 + int64(rng.IntN(int(r)+1))
	}
	vanish, twice := rng.IntN(10) == 0, rng.IntN(10) == 0
	if vanish {
		use = int64(rng.IntN(int(r) + 1))
	}
	e.Send = now()
	resp, err := client.Post(f.http[inst]+"/v1/check", "application/json", strings.NewReader(body(r)))
	if err != nil {
		e.Verdict = check.Timeout
	} else {
		record(resp, &e)
	}
	if e.Verdict == check.Allowed {
		e.Use = use
	}
	f.record(e)
	if e.Verdict != check.Allowed || vanish {
		return
	}
	time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
	n := 1
	if twice {
		n = 2
	}
	for range n {
		// A settle is never denied: answered allowed, or degraded when
		// the store could not take it (the reservation then stands).
		var se check.Event
		resp, err := client.Post(f.http[rng.IntN(len(f.http))]+"/v1/check", "application/json", strings.NewReader(body(use)))
		if err != nil {
			se.Verdict = check.Timeout
		} else {
			record(resp, &se)
		}
		outcome := se.Verdict
		if se.Degraded != "" {
			outcome = se.Degraded
		}
		f.mu.Lock()
		f.settles[outcome]++
		f.mu.Unlock()
	}
}

// record adds a decision to the history and notes a rule's denial.
func (f *Fleet) record(e check.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hist.Events = append(f.hist.Events, e)
	if f.denied != nil && testsBound(e) {
		f.denied[e.Rule] = true
	}
}

// testsBound reports whether e is a denial by the rule's limit: decided by
// the store, or by an instance's local share; not a failure policy's.
func testsBound(e check.Event) bool {
	return e.Verdict == check.Denied && (e.Degraded == "" || e.Degraded == check.Local)
}

func waitFor(t TB, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("fleet: %s: not within 30s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitReady(t TB, url string) {
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
			t.Fatalf("fleet: %s not ready within 60s: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freeAddr(t TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// writeFile replaces path atomically (a rename), as a ConfigMap swap or an
// editor's save does, so the watcher never reads half a file.
func writeFile(path, body string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	return nil
}

// Build builds the sluice binary into dir (proctest.GoBuild: one build at a
// time on the machine) and returns its path.
func Build(dir string) (string, error) {
	bin := filepath.Join(dir, "sluice")
	if out, err := proctest.GoBuild("", "-o", bin, "github.com/sluice-rl/sluice/cmd/sluice"); err != nil {
		return "", fmt.Errorf("fleet: %w\n%s", err, out)
	}
	return bin, nil
}

// syncBuffer is a bytes.Buffer safe for concurrent writes (a process's
// stdout and stderr) and reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// decidedAtHeader is server/api's DecidedAtHeader, spelled out: the
// harness reads the wire and imports nothing of the code under test.
const decidedAtHeader = "Sluice-Decided-At"

// record reads a /v1/check answer into e: when it came back, the verdict
// and degraded flag it gave, and the store's decision instant
// (Sluice-Decided-At, which --debug-decision-instant adds) as e.Decided.
func record(resp *http.Response, e *check.Event) {
	var cr struct {
		Allowed  bool
		Statuses []struct{ Degraded string }
	}
	derr := json.NewDecoder(resp.Body).Decode(&cr)
	resp.Body.Close()
	e.Recv = now()
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
	if at, err := strconv.ParseInt(resp.Header.Get(decidedAtHeader), 10, 64); err == nil && at > 0 {
		e.Decided = at
	}
}
