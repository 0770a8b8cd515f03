// Package dashboard serves the live dashboard (/dashboard, assets embedded,
// nothing fetched from the internet) and the read-only admin endpoints it
// draws from: /admin/v1/stats (decision counters, latency histogram,
// breaker state per store node, rule reload status) and /admin/v1/top (the
// keys most denied and checked per rule, from package observe).
//
// With a Fleet, every instance publishes its snapshot to the shared store
// every PublishInterval and both endpoints answer for the whole fleet:
// counters are summed and top lists merged (observe.MergeExports keeps the
// error bound). Nothing of this touches the check path: a check pays only
// the observe.Tracker update.
package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluice-rl/sluice/headers"
	"github.com/sluice-rl/sluice/observe"
	"github.com/sluice-rl/sluice/store/stack"
)

//go:embed assets
var assets embed.FS

// Fleet exchanges instance snapshots through a store the fleet shares
// (store/redis implements it). Both methods must be safe for concurrent
// use.
type Fleet interface {
	// Publish stores this instance's snapshot under its name.
	Publish(ctx context.Context, instance string, snapshot []byte) error
	// Collect returns every instance's latest snapshot, by instance.
	Collect(ctx context.Context) (map[string][]byte, error)
}

// ReloadStatus is what the rules loader reports.
type ReloadStatus struct {
	OK         bool      `json:"ok"`
	LastReload time.Time `json:"last_reload"`
	LastError  string    `json:"last_error,omitempty"`
}

// Options configure the handler. Tracker and Gatherer are required.
type Options struct {
	// Tracker holds this instance's top offenders.
	Tracker *observe.Tracker
	// Gatherer is the registry the engine's metrics are in.
	Gatherer prometheus.Gatherer
	// Health reports the store's nodes; nil reports none.
	Health func() []stack.NodeHealth
	// Reload reports the rules' reload status; nil reports none.
	Reload func() ReloadStatus
	// Auth wraps every route (the admin API's read access). Required: the
	// dashboard shows descriptor values, which are the admin API's to show.
	Auth func(http.Handler) http.Handler
	// Fleet, when set, makes the figures fleet-wide (see package doc).
	Fleet Fleet
	// Instance names this instance in the fleet; default the host name.
	Instance string
	// PublishInterval is how often Run publishes; default 2s. Snapshots
	// older than 5 intervals are ignored.
	PublishInterval time.Duration
	// Logger receives publish errors; nil discards.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Handler serves the dashboard routes. Create it with New.
type Handler struct {
	opts Options
	mux  *http.ServeMux
}

// Snapshot is one instance's state, as published to the fleet.
type Snapshot struct {
	Instance string         `json:"instance"`
	Time     time.Time      `json:"time"`
	Stats    Stats          `json:"stats"`
	Top      observe.Export `json:"top"`
}

// Stats is the answer of /admin/v1/stats.
type Stats struct {
	Time      time.Time `json:"time"`
	Instances []string  `json:"instances"`
	// Decisions are cumulative counts since each instance started.
	Decisions []Decision `json:"decisions"`
	// Tiers are cumulative decisions of tenants' rules by tier (rule
	// "tier" holds the tier's name; domain is empty).
	Tiers    []Decision         `json:"tiers"`
	Latency  Histogram          `json:"latency"`
	Breakers []stack.NodeHealth `json:"breakers"`
	Reload   []InstanceReload   `json:"reload"`
}

// Decision is one counter of sluice_decisions_total.
type Decision struct {
	Domain  string  `json:"domain"`
	Rule    string  `json:"rule"`
	Outcome string  `json:"outcome"`
	Count   float64 `json:"count"`
}

// Histogram is sluice_check_duration_seconds: cumulative bucket counts.
type Histogram struct {
	Count   uint64    `json:"count"`
	Sum     float64   `json:"sum"`
	Bounds  []float64 `json:"bounds"` // upper bounds, seconds; +Inf left out
	Buckets []uint64  `json:"buckets"`
}

// InstanceReload is one instance's rule reload status.
type InstanceReload struct {
	Instance string `json:"instance"`
	ReloadStatus
}

// New returns the dashboard handler.
func New(opts Options) (*Handler, error) {
	if opts.Tracker == nil || opts.Gatherer == nil {
		return nil, errors.New("dashboard: Tracker and Gatherer are required")
	}
	if opts.Auth == nil {
		return nil, errors.New("dashboard: Auth is required (the dashboard shows descriptor values)")
	}
	if opts.PublishInterval <= 0 {
		opts.PublishInterval = 2 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	h := &Handler{opts: opts, mux: http.NewServeMux()}
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	files := http.StripPrefix("/dashboard/", http.FileServerFS(static))
	h.mux.Handle("GET /dashboard/", files)
	h.mux.Handle("GET /dashboard", http.RedirectHandler("/dashboard/", http.StatusMovedPermanently))
	h.mux.HandleFunc("GET /admin/v1/stats", h.stats)
	h.mux.HandleFunc("GET /admin/v1/top", h.top)
	return h, nil
}

// Routes lists the patterns the handler serves, to mount it on a mux.
func (h *Handler) Routes() []string {
	return []string{"/dashboard", "/dashboard/", "/admin/v1/stats", "/admin/v1/top"}
}

// ServeHTTP serves the routes behind Options.Auth.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.opts.Auth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		h.mux.ServeHTTP(w, r)
	})).ServeHTTP(w, r)
}

// Run publishes this instance's snapshot to the fleet every
// PublishInterval until ctx ends. Without a Fleet it returns at once.
func (h *Handler) Run(ctx context.Context) {
	if h.opts.Fleet == nil {
		return
	}
	t := time.NewTicker(h.opts.PublishInterval)
	defer t.Stop()
	for {
		if err := h.publish(ctx); err != nil && ctx.Err() == nil {
			h.opts.Logger.Warn("dashboard: publishing to the fleet failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// topWindow is how much of the top lists an instance publishes: all the
// tracker keeps.
func (h *Handler) topWindow() time.Duration {
	o := h.opts.Tracker.Options()
	return time.Duration(o.Buckets) * o.Bucket
}

func (h *Handler) publish(ctx context.Context) error {
	snap, err := h.local()
	if err != nil {
		return err
	}
	b, err := json.Marshal(snap)
	if err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, h.opts.PublishInterval)
	defer cancel()
	return h.opts.Fleet.Publish(ctx, h.instance(), b)
}

func (h *Handler) instance() string {
	if h.opts.Instance != "" {
		return h.opts.Instance
	}
	return "local"
}

// local builds this instance's snapshot.
func (h *Handler) local() (Snapshot, error) {
	now := h.opts.Now()
	st, err := h.localStats(now)
	if err != nil {
		return Snapshot{}, err
	}
	return Snapshot{Instance: h.instance(), Time: now, Stats: st, Top: h.opts.Tracker.Export(now, h.topWindow())}, nil
}

// snapshots returns the snapshots to answer from: the live fleet's, or
// this instance's alone.
func (h *Handler) snapshots(ctx context.Context) ([]Snapshot, error) {
	self, err := h.local()
	if err != nil {
		return nil, err
	}
	if h.opts.Fleet == nil {
		return []Snapshot{self}, nil
	}
	raw, err := h.opts.Fleet.Collect(ctx)
	if err != nil {
		return nil, fmt.Errorf("dashboard: reading the fleet: %w", err)
	}
	out := []Snapshot{self}
	stale := self.Time.Add(-5 * h.opts.PublishInterval)
	for inst, b := range raw {
		if inst == self.Instance {
			continue
		}
		var s Snapshot
		if json.Unmarshal(b, &s) != nil || s.Time.Before(stale) {
			continue
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Instance < out[j].Instance })
	return out, nil
}

func (h *Handler) stats(w http.ResponseWriter, r *http.Request) {
	snaps, err := h.snapshots(r.Context())
	if err != nil {
		httpError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	writeJSON(w, mergeStats(snaps))
}

// mergeStats sums the snapshots' counters and histograms and lists their
// breakers and reload states.
func mergeStats(snaps []Snapshot) Stats {
	var out Stats
	type dk struct{ d, r, o string }
	sum, tiers := map[dk]float64{}, map[dk]float64{}
	breakers := map[string]stack.NodeHealth{}
	for _, s := range snaps {
		out.Instances = append(out.Instances, s.Instance)
		if s.Time.After(out.Time) {
			out.Time = s.Time
		}
		for _, d := range s.Stats.Decisions {
			sum[dk{d.Domain, d.Rule, d.Outcome}] += d.Count
		}
		for _, d := range s.Stats.Tiers {
			tiers[dk{"", d.Rule, d.Outcome}] += d.Count
		}
		lat := s.Stats.Latency
		if out.Latency.Bounds == nil {
			out.Latency.Bounds = lat.Bounds
			out.Latency.Buckets = make([]uint64, len(lat.Bounds))
		}
		if len(lat.Buckets) == len(out.Latency.Buckets) {
			for i, c := range lat.Buckets {
				out.Latency.Buckets[i] += c
			}
			out.Latency.Count += lat.Count
			out.Latency.Sum += lat.Sum
		}
		for _, b := range s.Stats.Breakers {
			// Instances see the same nodes; the worst view wins.
			if cur, ok := breakers[b.Node]; !ok || severity(b.State) > severity(cur.State) {
				breakers[b.Node] = b
			}
		}
		out.Reload = append(out.Reload, s.Stats.Reload...)
	}
	for k, c := range sum {
		out.Decisions = append(out.Decisions, Decision{Domain: k.d, Rule: k.r, Outcome: k.o, Count: c})
	}
	for k, c := range tiers {
		out.Tiers = append(out.Tiers, Decision{Rule: k.r, Outcome: k.o, Count: c})
	}
	sort.Slice(out.Tiers, func(i, j int) bool {
		if out.Tiers[i].Rule != out.Tiers[j].Rule {
			return out.Tiers[i].Rule < out.Tiers[j].Rule
		}
		return out.Tiers[i].Outcome < out.Tiers[j].Outcome
	})
	if out.Tiers == nil {
		out.Tiers = []Decision{}
	}
	sort.Slice(out.Decisions, func(i, j int) bool {
		a, b := out.Decisions[i], out.Decisions[j]
		if a.Domain != b.Domain {
			return a.Domain < b.Domain
		}
		if a.Rule != b.Rule {
			return a.Rule < b.Rule
		}
		return a.Outcome < b.Outcome
	})
	for _, b := range breakers {
		out.Breakers = append(out.Breakers, b)
	}
	sort.Slice(out.Breakers, func(i, j int) bool { return out.Breakers[i].Node < out.Breakers[j].Node })
	if out.Decisions == nil {
		out.Decisions = []Decision{}
	}
	if out.Breakers == nil {
		out.Breakers = []stack.NodeHealth{}
	}
	return out
}

func severity(state string) int {
	switch state {
	case "open":
		return 2
	case "half-open":
		return 1
	}
	return 0
}

// localStats reads this instance's figures from the metrics registry.
func (h *Handler) localStats(now time.Time) (Stats, error) {
	st := Stats{Time: now, Instances: []string{h.instance()}, Decisions: []Decision{}, Breakers: []stack.NodeHealth{}}
	mfs, err := h.opts.Gatherer.Gather()
	if err != nil {
		return st, fmt.Errorf("dashboard: gathering metrics: %w", err)
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "sluice_decisions_total":
			for _, m := range mf.GetMetric() {
				l := labels(m)
				st.Decisions = append(st.Decisions, Decision{Domain: l["domain"], Rule: l["rule"], Outcome: l["outcome"], Count: m.GetCounter().GetValue()})
			}
		case "sluice_tier_decisions_total":
			for _, m := range mf.GetMetric() {
				l := labels(m)
				st.Tiers = append(st.Tiers, Decision{Rule: l["tier"], Outcome: l["outcome"], Count: m.GetCounter().GetValue()})
			}
		case "sluice_check_duration_seconds":
			if ms := mf.GetMetric(); len(ms) == 1 {
				hg := ms[0].GetHistogram()
				st.Latency.Count, st.Latency.Sum = hg.GetSampleCount(), hg.GetSampleSum()
				for _, b := range hg.GetBucket() {
					if math.IsInf(b.GetUpperBound(), 1) {
						continue
					}
					st.Latency.Bounds = append(st.Latency.Bounds, b.GetUpperBound())
					st.Latency.Buckets = append(st.Latency.Buckets, b.GetCumulativeCount())
				}
			}
		}
	}
	if h.opts.Health != nil {
		st.Breakers = append(st.Breakers, h.opts.Health()...)
	}
	if h.opts.Reload != nil {
		st.Reload = []InstanceReload{{Instance: h.instance(), ReloadStatus: h.opts.Reload()}}
	}
	return st, nil
}

func labels(m *dto.Metric) map[string]string {
	out := make(map[string]string, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// TopResponse is the answer of /admin/v1/top.
type TopResponse struct {
	Window    string           `json:"window"`
	Instances []string         `json:"instances"`
	Rules     []observe.Report `json:"rules"`
}

// maxTopN bounds n in /admin/v1/top.
const maxTopN = 100

func (h *Handler) top(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	n := 10
	if s := q.Get("n"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > maxTopN {
			httpError(w, http.StatusBadRequest, fmt.Sprintf("n: %q, want an integer from 1 to %d", s, maxTopN))
			return
		}
		n = v
	}
	window := 5 * time.Minute
	if s := q.Get("window"); s != "" {
		v, err := time.ParseDuration(s)
		if err != nil || v <= 0 || v > h.topWindow() {
			httpError(w, http.StatusBadRequest, fmt.Sprintf("window: %q, want a duration up to %v", s, h.topWindow()))
			return
		}
		window = v
	}
	domain, rule := q.Get("domain"), q.Get("rule")
	if len(domain) > 256 || len(rule) > 256 {
		httpError(w, http.StatusBadRequest, "domain and rule: at most 256 bytes each")
		return
	}
	snaps, err := h.snapshots(r.Context())
	if err != nil {
		httpError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	exports := make([]observe.Export, len(snaps))
	resp := TopResponse{Window: window.String(), Rules: []observe.Report{}}
	for i, s := range snaps {
		exports[i] = s.Top
		resp.Instances = append(resp.Instances, s.Instance)
	}
	for _, win := range observe.MergeExports(h.opts.Now(), window, domain, rule, exports...) {
		resp.Rules = append(resp.Rules, win.Report(n))
	}
	writeJSON(w, resp)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

func httpError(w http.ResponseWriter, status int, detail string) {
	headers.WriteProblem(w, headers.Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail})
}

// localFleet is a Fleet in memory, for tests and single-process use.
type localFleet struct {
	mu sync.Mutex
	m  map[string][]byte
}

// NewMemoryFleet returns a Fleet kept in memory: handlers sharing it see
// each other as one fleet (for tests and for several engines in one
// process).
func NewMemoryFleet() Fleet { return &localFleet{m: map[string][]byte{}} }

func (f *localFleet) Publish(_ context.Context, instance string, b []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.m[instance] = append([]byte(nil), b...)
	return nil
}

func (f *localFleet) Collect(context.Context) (map[string][]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string][]byte, len(f.m))
	for k, v := range f.m {
		out[k] = v
	}
	return out, nil
}
