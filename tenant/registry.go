package tenant

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/rules"
)

// Change names what changed in a Source.
type Change struct {
	// Tenant whose record changed (was written or removed); "" when the
	// change is to the switches only.
	Tenant string
	// Switches: the rule switches changed.
	Switches bool
	// Deny: the deny entries changed.
	Deny bool
}

// Source is where records and switches live. tenant/pg implements it over
// PostgreSQL. Implementations are safe for concurrent use.
type Source interface {
	// Listen reports changes until ctx ends or the connection to the source
	// fails; it returns the reason (nil once ctx is done). It calls ready
	// once, when every change committed from then on will be reported, and
	// changed for each change, in commit order, from one goroutine.
	Listen(ctx context.Context, ready func(), changed func(Change)) error
	// LoadAll calls each for every record, in no particular order.
	LoadAll(ctx context.Context, each func(*Record) error) error
	// Load returns the record of one tenant; found is false when it has
	// none.
	Load(ctx context.Context, tenant string) (rec Record, found bool, err error)
	// Switches returns every rule switch that is not on.
	Switches(ctx context.Context) ([]RuleSwitch, error)
	// DenyEntries returns every deny entry (at most MaxDenyEntries).
	DenyEntries(ctx context.Context) ([]DenyEntry, error)
}

// Options configure a Registry. The zero value is usable.
type Options struct {
	// Resync is how often the whole snapshot is read again, the backstop
	// for a change notification that was lost. Zero means one minute.
	Resync time.Duration
	// RetryMin and RetryMax bound the wait between attempts to reach a
	// failing source (doubling from RetryMin). Zero means 100ms and 5s.
	RetryMin, RetryMax time.Duration
	// MaxDelta is how many tenants may change between full loads before the
	// registry reads everything again (each change copies the changed set).
	// Zero means 4096.
	MaxDelta int
	// Now is the clock for effective and expiry times. Nil means time.Now.
	Now func() time.Time
	// OnError, if set, is told of every failure of the source (the registry
	// keeps serving its last snapshot and retries) and of the snapshot
	// file. Packages do not log; servers pass a function that does.
	OnError func(error)
	// File, if set, is where the registry keeps the last snapshot it loaded
	// from the source (see WriteFile), and where Restore reads it from, so
	// that an instance started while the source is down enforces the
	// tenants it last knew. "" keeps nothing on disk.
	File string
	// FileMaxBytes bounds the file; zero means DefaultMaxFileBytes.
	FileMaxBytes int64
	// FileEvery is the least time between two writes of the file (a burst
	// of changes writes it once); zero means 10s. A full load is written as
	// soon as the previous write is that old.
	FileEvery time.Duration
	// Copy, if set, is the copy of the snapshot the instances of a fleet
	// share (sluice serve keeps it in Redis). While Live, Run writes the
	// snapshot there after changes (see CopyEvery, CopyRefresh); until
	// the first full load, Run reads it (after CopyWait) and puts it in
	// force when it is newer than what is (the File's), so that a new
	// instance with no File and no Source enforces the fleet's tenants.
	Copy Copy
	// CopyMaxBytes bounds the copy, written and read; zero means
	// DefaultMaxCopyBytes. A larger snapshot is not written (CopyErr says
	// so) and a larger copy is not read.
	CopyMaxBytes int64
	// CopyEvery is the least time between two writes of the copy by this
	// registry; zero means 10s.
	CopyEvery time.Duration
	// CopyRefresh: a live registry rewrites a copy this old even when
	// nothing changed, so that the copy's age says how current it is;
	// zero means 10 minutes. Copies are otherwise written only when this
	// registry has changes newer than the copy held.
	CopyRefresh time.Duration
	// CopyWait is how long Run waits for the first full load before it
	// reads the copy (a source that answers makes the read needless);
	// zero means 1s.
	CopyWait time.Duration
	// OnSource, if set, is told the Status each time Run puts in force a
	// snapshot from another place than the one before (Status.Source
	// changes: a copy restored, the first full load), from Run's
	// goroutines. Restore, whose caller knows, does not call it.
	OnSource func(Status)
}

// Copy is a snapshot shared by the instances of a fleet, kept in the
// encoding of WriteSnapshot under a version: the Unix µs at which its
// writer, live, encoded it. Implementations are safe for concurrent use.
type Copy interface {
	// Version returns the version of the copy held; 0 when none is.
	Version(ctx context.Context) (int64, error)
	// Put stores data as the copy with version v, unless the copy held has
	// a version of v or more (an older copy never replaces a newer one);
	// stored reports whether it did.
	Put(ctx context.Context, v int64, data []byte) (stored bool, err error)
	// Get returns the copy held and its version (nil data and 0: none). A
	// copy larger than maxBytes is not transferred: Get returns an error.
	Get(ctx context.Context, maxBytes int64) (v int64, data []byte, err error)
}

// ErrCopy is wrapped by every failure to read or write Options.Copy that
// Options.OnError and Status.CopyErr report, so a server can tell them from
// the source's.
var ErrCopy = errors.New("tenant: shared copy")

// DefaultMaxCopyBytes bounds the shared copy when Options.CopyMaxBytes is
// zero: 64 MiB, about 1.8 million tenants with no overrides (36 bytes each
// with 14-byte names), 370 000 with one override each (179 bytes).
const DefaultMaxCopyBytes = 64 << 20

func (o Options) withDefaults() Options {
	if o.Resync <= 0 {
		o.Resync = time.Minute
	}
	if o.RetryMin <= 0 {
		o.RetryMin = 100 * time.Millisecond
	}
	if o.RetryMax <= 0 {
		o.RetryMax = 5 * time.Second
	}
	if o.MaxDelta <= 0 {
		o.MaxDelta = 4096
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.OnError == nil {
		o.OnError = func(error) {}
	}
	if o.FileEvery <= 0 {
		o.FileEvery = 10 * time.Second
	}
	if o.CopyMaxBytes <= 0 {
		o.CopyMaxBytes = DefaultMaxCopyBytes
	}
	if o.CopyEvery <= 0 {
		o.CopyEvery = 10 * time.Second
	}
	if o.CopyRefresh <= 0 {
		o.CopyRefresh = 10 * time.Minute
	}
	if o.CopyWait <= 0 {
		o.CopyWait = time.Second
	}
	return o
}

// Where a Registry's snapshot came from (Status.Source).
const (
	// SourceNone: nothing loaded yet; every tenant is on the free tier.
	SourceNone = "none"
	// SourceLive: loaded from the Source by this process.
	SourceLive = "live"
	// SourceFile: read from the snapshot file (Options.File) at start,
	// the Source being out of reach; replaced by the first full load.
	SourceFile = "snapshot"
	// SourceCopy: read from the fleet's shared copy (Options.Copy, which
	// sluice serve keeps in Redis, hence the name), the Source being out
	// of reach; replaced by the first full load.
	SourceCopy = "redis"
)

// What the last read of the shared copy found (Status.CopyRead).
const (
	// CopyUnread: not read (yet): no Options.Copy, a full load came
	// first, or every read so far failed (Status.CopyErr says why).
	CopyUnread = ""
	// CopyNone: no copy is held.
	CopyNone = "none"
	// CopyOlder: the copy held was not newer than the snapshot in force.
	CopyOlder = "older"
	// CopyRestored: the copy is in force (Source is SourceCopy), or was
	// until a full load replaced it.
	CopyRestored = "restored"
)

// Status says how current a Registry's snapshot is.
type Status struct {
	// Source is where the snapshot in force came from: SourceNone,
	// SourceLive, SourceFile or SourceCopy.
	Source string
	// DataAt is when the snapshot's data was read from the source (by this
	// process, or by the one that wrote the file or the copy); zero with
	// SourceNone.
	DataAt time.Time
	// CopyRead is what the last read of Options.Copy found (CopyUnread,
	// CopyNone, CopyOlder, CopyRestored); CopyWritten is when this process
	// last wrote it (zero: never); CopyErr the last failure to read or
	// write it, nil after a success.
	CopyRead    string
	CopyWritten time.Time
	CopyErr     error
	// FileWritten is when this process last wrote Options.File (zero:
	// never); FileErr the last failure to write it, nil after a success.
	FileWritten time.Time
	FileErr     error
	// Synced: a full load has completed at least once.
	Synced bool
	// Live: the registry is listening to the source and its last full load
	// succeeded, so changes arrive as they are made. When not Live, the
	// snapshot is stale: checks go on with the last one known.
	Live bool
	// LastSync is when the last full load completed (zero: never).
	LastSync time.Time
	// Tenants is the number of records in the snapshot.
	Tenants int
	// Err is the last failure of the source, nil once it works again.
	Err error
}

// Registry keeps the snapshot of a Source current: a full load at start and
// every Options.Resync, one record at a time as the Source reports changes.
// Its lookups (Resolve) never wait on the source. It is safe for concurrent
// use; create it with NewRegistry and call Run.
type Registry struct {
	src  Source
	opts Options
	snap atomic.Pointer[Snapshot]
	view atomic.Pointer[overlay] // snap as a rules.Overlay (see Overlay)

	mu     sync.Mutex
	status Status
	synced chan struct{} // closed after the first full load
	once   sync.Once
	dirty  chan struct{} // a snapshot to write to Options.File (1 slot)

	loaded    atomic.Bool   // a snapshot from the source, the file or the copy is in force
	failed    chan struct{} // closed at the source's first failure
	failOnce  sync.Once
	copyDirty chan struct{} // a change to write to Options.Copy (1 slot)
	// Guarded by mu: the version of the copy in force (SourceCopy), and
	// when (Unix µs) the snapshot last changed in a way the copy must get.
	copyVersion int64
	changedAt   int64
	badCopy     int64 // the version of a copy that did not decode
}

// NewRegistry returns a registry over src (nil: no source; the snapshot
// stays empty until Set). It serves an empty snapshot, every tenant on the
// free tier, until Run has loaded the source.
func NewRegistry(src Source, opts Options) *Registry {
	g := &Registry{src: src, opts: opts.withDefaults(), synced: make(chan struct{}), dirty: make(chan struct{}, 1),
		failed: make(chan struct{}), copyDirty: make(chan struct{}, 1)}
	g.snap.Store(&Snapshot{})
	g.status.Source = SourceNone
	return g
}

// Restore reads Options.File into the registry, for a process starting
// before its first full load: call it before Run. It does nothing once a
// full load has completed, and returns an error (the registry keeps what
// it has) when the file is missing, unreadable or invalid.
func (g *Registry) Restore() error {
	if g.opts.File == "" {
		return errors.New("tenant: Restore: no Options.File")
	}
	s, err := ReadFile(g.opts.File, g.opts.FileMaxBytes)
	if err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.status.Synced {
		return nil
	}
	g.snap.Store(s)
	g.status.Source, g.status.DataAt = SourceFile, s.At()
	g.loaded.Store(true)
	return nil
}

// Loaded reports whether the snapshot in force came from somewhere: a full
// load of the source, the file (Restore) or the shared copy. Until then
// every tenant is on the free tier, which a server should not call ready
// (sluice serve --tenants-unloaded). Once true it stays true. It does not
// allocate or lock.
func (g *Registry) Loaded() bool { return g.loaded.Load() }

// changed marks the snapshot to be written to Options.File and, when this
// is a change the copy must get (a change applied, the first full load of
// a session), to Options.Copy.
func (g *Registry) changed(forCopy bool) {
	if g.opts.File != "" {
		select {
		case g.dirty <- struct{}{}:
		default:
		}
	}
	if g.opts.Copy != nil {
		if forCopy {
			g.mu.Lock()
			g.changedAt = g.opts.Now().UnixMicro()
			g.mu.Unlock()
		}
		select {
		case g.copyDirty <- struct{}{}:
		default:
		}
	}
}

// keepFile writes the snapshot to Options.File when it changes, at most
// once per Options.FileEvery, until ctx is done (then once more if a
// change is pending).
func (g *Registry) keepFile(ctx context.Context) {
	write := func() {
		err := WriteFile(g.opts.File, g.snap.Load(), g.opts.FileMaxBytes)
		g.setStatus(func(s *Status) {
			s.FileErr = err
			if err == nil {
				s.FileWritten = g.opts.Now()
			}
		})
		if err != nil {
			g.opts.OnError(err)
		}
	}
	for {
		select {
		case <-ctx.Done():
			select {
			case <-g.dirty:
				write()
			default:
			}
			return
		case <-g.dirty:
			write()
		}
		select {
		case <-ctx.Done():
		case <-time.After(g.opts.FileEvery):
		}
	}
}

// Resolve returns the limit rule r enforces for a request with these
// entries (nil: the rule's own Limit), the tier of the request's tenant
// (rules.NumTiers when the rule is not a tenant's) and the rule's switch
// state; see the package comment for the order. It does not allocate, and
// it satisfies service.Overrides.
func (g *Registry) Resolve(r *rules.Rule, entries []rules.Entry) (*rules.TierLimit, rules.Tier, rules.Switch) {
	return g.snap.Load().ResolveTier(r, entries, g.opts.Now)
}

// DenyList returns the deny list the admin API keeps for domain (nil: none),
// from the snapshot in force. It does not allocate; service.Engine consults
// it beside the rule files' deny lists.
func (g *Registry) DenyList(domain string) *rules.DenyList {
	return g.snap.Load().DenyList(domain)
}

// Snapshot returns the snapshot in force.
func (g *Registry) Snapshot() *Snapshot { return g.snap.Load() }

// Set replaces the snapshot (for programs that build one themselves, and
// tests). A running registry replaces it again on its next load.
func (g *Registry) Set(s *Snapshot) { g.snap.Store(s) }

// Status reports how current the snapshot is.
func (g *Registry) Status() Status {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.status
	st.Tenants = g.snap.Load().Len()
	return st
}

// Synced returns a channel closed once the first full load has completed.
func (g *Registry) Synced() <-chan struct{} { return g.synced }

// sourceChanged tells Options.OnSource when the source in force is no
// longer was. mu must not be held.
func (g *Registry) sourceChanged(was string) {
	if g.opts.OnSource == nil {
		return
	}
	if st := g.Status(); st.Source != was {
		g.opts.OnSource(st)
	}
}

func (g *Registry) setStatus(f func(*Status)) {
	g.mu.Lock()
	f(&g.status)
	g.mu.Unlock()
}

// Run keeps the snapshot current until ctx is done, then returns nil. While
// the source fails it keeps the last snapshot, reports each failure to
// Options.OnError and retries with backoff.
func (g *Registry) Run(ctx context.Context) error {
	if g.src == nil {
		return errors.New("tenant: Run: no source")
	}
	if g.opts.File != "" {
		fctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { g.keepFile(fctx); close(done) }()
		defer func() { stop(); <-done }()
	}
	if g.opts.Copy != nil {
		cctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); g.keepCopy(cctx) }()
		go func() { defer wg.Done(); g.restoreCopy(cctx) }()
		defer func() { stop(); wg.Wait() }()
	}
	wait := g.opts.RetryMin
	for ctx.Err() == nil {
		synced, err := g.session(ctx)
		if ctx.Err() != nil {
			break
		}
		if err == nil {
			err = errors.New("tenant: source stopped listening")
		}
		g.setStatus(func(s *Status) { s.Live, s.Err = false, err })
		g.failOnce.Do(func() { close(g.failed) })
		g.opts.OnError(err)
		if synced {
			wait = g.opts.RetryMin
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, g.opts.RetryMax)
	}
	g.setStatus(func(s *Status) { s.Live = false })
	return nil
}

// session listens, loads everything, then applies changes as they come
// until the source fails. synced reports whether the full load succeeded.
func (g *Registry) session(ctx context.Context) (synced bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changes := make(chan Change, 1024)
	var overflow atomic.Bool
	ready := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		var once sync.Once
		errc <- g.src.Listen(ctx, func() { once.Do(func() { close(ready) }) }, func(c Change) {
			select {
			case changes <- c:
			default:
				overflow.Store(true) // a full load will cover it
			}
		})
	}()
	select {
	case <-ready:
	case err := <-errc:
		return false, fmt.Errorf("tenant: listen: %w", err)
	case <-ctx.Done():
		return false, nil
	}
	// The session's first full load may bring changes made while this
	// registry was not listening: the copy must get them.
	if err := g.fullLoad(ctx, true); err != nil {
		return false, err
	}
	resync := time.NewTicker(g.opts.Resync)
	defer resync.Stop()
	for {
		select {
		case <-ctx.Done():
			return true, nil
		case err := <-errc:
			return true, fmt.Errorf("tenant: listen: %w", err)
		case <-resync.C:
			if err := g.fullLoad(ctx, false); err != nil {
				return true, err
			}
		case c := <-changes:
			if err := g.apply(ctx, c); err != nil {
				return true, err
			}
			if overflow.Swap(false) {
				if err := g.fullLoad(ctx, true); err != nil {
					return true, err
				}
			}
		}
	}
}

// fullLoad reads everything and swaps the snapshot. changes: it may bring
// changes no notification reported (Options.Copy must get them); a
// periodic resync passes false, and a change it finds reaches the copy
// within Options.CopyRefresh.
func (g *Registry) fullLoad(ctx context.Context, changes bool) error {
	at := g.opts.Now()
	b := newBuilder(g.snap.Load().Len(), at)
	if err := g.src.LoadAll(ctx, func(rec *Record) error { b.add(rec); return nil }); err != nil {
		return fmt.Errorf("tenant: load: %w", err)
	}
	sw, err := g.src.Switches(ctx)
	if err != nil {
		return fmt.Errorf("tenant: load switches: %w", err)
	}
	deny, err := g.src.DenyEntries(ctx)
	if err != nil {
		return fmt.Errorf("tenant: load deny entries: %w", err)
	}
	snap := b.done(sw).withDeny(deny)
	var was string
	g.setStatus(func(s *Status) {
		g.snap.Store(snap) // under mu: a Restore running now must not replace it
		s.Synced, s.Live, s.LastSync, s.Err = true, true, g.opts.Now(), nil
		was, s.Source, s.DataAt = s.Source, SourceLive, at
	})
	g.loaded.Store(true)
	g.sourceChanged(was)
	g.once.Do(func() { close(g.synced) })
	g.changed(changes)
	return nil
}

// apply reads what one change touched and swaps the snapshot.
func (g *Registry) apply(ctx context.Context, c Change) error {
	cur := g.snap.Load()
	if c.Switches {
		sw, err := g.src.Switches(ctx)
		if err != nil {
			return fmt.Errorf("tenant: load switches: %w", err)
		}
		cur = cur.withSwitches(sw)
		g.snap.Store(cur)
		g.changed(true)
	}
	if c.Deny {
		deny, err := g.src.DenyEntries(ctx)
		if err != nil {
			return fmt.Errorf("tenant: load deny entries: %w", err)
		}
		cur = cur.withDeny(deny)
		g.snap.Store(cur)
		g.changed(true)
	}
	if c.Tenant == "" {
		return nil
	}
	if len(cur.delta) >= g.opts.MaxDelta {
		return g.fullLoad(ctx, true)
	}
	at := g.opts.Now()
	rec, found, err := g.src.Load(ctx, c.Tenant)
	if err != nil {
		return fmt.Errorf("tenant: load %q: %w", c.Tenant, err)
	}
	var p *Record
	if found {
		p = &rec
	}
	g.snap.Store(cur.withTenant(c.Tenant, p, at))
	g.changed(true)
	return nil
}
