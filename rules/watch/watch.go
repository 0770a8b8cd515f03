// Package watch keeps the rules of a directory current: it loads the
// directory (rules.LoadDir), watches it with fsnotify, and swaps in a new
// snapshot after each change. It is the only part of Sluice that needs a
// file watcher, so programs that build their rules otherwise do not link one.
package watch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/sluice-rl/sluice/rules"
)

// DefaultDebounce is how long a Watcher waits after the last change in its
// directory before reloading, so that a burst of writes (an editor saving, a
// ConfigMap swap) becomes one reload.
const DefaultDebounce = 100 * time.Millisecond

// Watcher keeps the current rules.Snapshot of a rule directory and reloads it
// when the directory changes.
//
// Current is safe for concurrent use at any time and never returns a
// half-built snapshot: a reload builds a whole new Snapshot and swaps one
// pointer. A reload that fails keeps the last good snapshot; LastError says
// why it failed. Create a Watcher with New, set OnReload and Debounce (if
// wanted) before calling Run or Reload, then call Run once (or Close, if Run
// will never be called).
type Watcher struct {
	// OnReload, if set, is called after every reload attempt (not the first
	// load in New) with whether it succeeded and, if not, why. It runs
	// on the reloading goroutine and must not block. Set it before Run.
	OnReload func(ok bool, err error)
	// Debounce is the quiet period after a change before reloading;
	// zero means DefaultDebounce. Set it before Run.
	Debounce time.Duration
	// Guard, when set, holds back reloads that would remove what is in
	// use (see Guard). Set it before Run.
	Guard *Guard
	// OnHold, if set, is called after every successful load of the
	// directory with the hold it caused, or nil when the new rules were
	// applied. It runs on the reloading goroutine and must not block. Set
	// it before Run.
	OnHold func(h *rules.Hold)

	dir    string
	opts   rules.Options
	logger *slog.Logger
	cur    atomic.Pointer[rules.Snapshot]
	fw     *fsnotify.Watcher
	clean  string // filepath.Clean(dir)
	// prices is filepath.Clean(opts.PricesFile) ("" without one), read
	// with the rules by each load; pricesDir is its directory, watched
	// too when it is not dir.
	prices, pricesDir string

	mu         sync.Mutex // serializes reloads; guards lastErr, lastReload and held
	lastErr    error
	lastReload time.Time
	held       *rules.Hold
}

// Guard holds back a reload that would remove a domain, or a rule that saw
// traffic recently: the rules in force stay until the operator confirms
// the removal. A confirmation is AllowRemoval, a marker file
// (rules.AllowRemovalFile, see rules.ParseAllowRemoval) in the directory
// naming what may go, or, when Settle is set, the same removal still
// there Settle after it was first held. A removal that comes and goes with
// the files (a ConfigMap swap, files written one by one) is never applied.
type Guard struct {
	// AllowRemoval turns the guard off: every valid reload is applied.
	AllowRemoval bool
	// InUse reports whether a rule saw traffic recently; nil: no rule
	// does (only removed domains hold a reload).
	InUse func(r rules.RuleRef) bool
	// Settle, when above zero, applies a held removal once the same
	// removal has been held this long; zero: only a confirmation applies
	// it.
	Settle time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// ErrHeld marks the error Reload returns when a guard held the new rules
// back (see Guard); test with errors.Is.
var ErrHeld = errors.New("rules: reload held")

func (g *Guard) now() time.Time {
	if g.Now != nil {
		return g.Now()
	}
	return time.Now()
}

// New starts watching dir, then loads it once (see rules.LoadDir) and
// returns a Watcher holding the result. Watching comes first, so a change
// made while the first load runs is seen by Run, never lost. New fails if
// the directory cannot be watched or that first load fails: a service must
// not start without its rules. logger may be nil (no logging).
func New(dir string, opts rules.Options, logger *slog.Logger) (*Watcher, error) {
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	w := &Watcher{dir: dir, opts: opts, logger: logger, clean: filepath.Clean(dir)}
	if opts.PricesFile != "" && opts.Prices == nil {
		w.prices = filepath.Clean(opts.PricesFile)
		w.pricesDir = filepath.Dir(w.prices)
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("rules: watch %s: %w", dir, err)
	}
	if err := w.watch(fw); err != nil {
		_ = fw.Close()
		return nil, err
	}
	s, err := rules.LoadDir(dir, opts)
	if err != nil {
		_ = fw.Close()
		return nil, err
	}
	w.fw, w.lastReload = fw, time.Now()
	w.cur.Store(s)
	return w, nil
}

// watch adds the directory to fw and, when it is a symlink, its parent too,
// so that replacing the link is seen; and the price table's directory.
func (w *Watcher) watch(fw *fsnotify.Watcher) error {
	if w.pricesDir != "" && w.pricesDir != w.clean {
		if err := fw.Add(w.pricesDir); err != nil {
			return fmt.Errorf("rules: watch %s: %w", w.pricesDir, err)
		}
	}
	if err := fw.Add(w.dir); err != nil {
		return fmt.Errorf("rules: watch %s: %w", w.dir, err)
	}
	if real, err := filepath.EvalSymlinks(w.clean); err == nil && real != w.clean {
		if err := fw.Add(filepath.Dir(w.clean)); err != nil {
			return fmt.Errorf("rules: watch %s: %w", filepath.Dir(w.clean), err)
		}
	}
	return nil
}

// Close stops watching. Run does it when it returns; call Close only for a
// Watcher whose Run is never called.
func (w *Watcher) Close() error { return w.fw.Close() }

// Current returns the snapshot in force. It never returns nil.
func (w *Watcher) Current() *rules.Snapshot { return w.cur.Load() }

// Dir returns the directory the watcher loads.
func (w *Watcher) Dir() string { return w.dir }

// LastError returns the error of the most recent reload, or nil if it
// succeeded (or none has happened since New).
func (w *Watcher) LastError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastErr
}

// LastReload returns when the snapshot in force was loaded.
func (w *Watcher) LastReload() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastReload
}

// Held returns the hold in place (a copy), or nil when the rules in force
// are the directory's.
func (w *Watcher) Held() *rules.Hold {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held == nil {
		return nil
	}
	h := *w.held
	return &h
}

// Reload loads the directory now. On success it swaps in the new snapshot,
// unless the Guard holds it back; on failure it keeps the current one. It
// records the outcome, logs it, and returns the load's error (or one
// wrapping ErrHeld). OnReload is called after every load that failed or
// was applied, OnHold after every load that succeeded (held or not).
func (w *Watcher) Reload() error {
	w.mu.Lock()
	s, err := rules.LoadDir(w.dir, w.opts)
	var hold *rules.Hold
	var removed rules.Removal
	if err == nil {
		hold, removed, err = w.guard(s)
	}
	if err == nil && hold == nil {
		w.cur.Store(s)
		w.lastReload = time.Now()
		w.held = nil
	}
	w.lastErr = err // nil when held: the files are valid
	w.mu.Unlock()
	switch {
	case hold != nil:
		w.logger.Warn("rules reload held: the new rules remove what is in use; the rules in force stay until the removal is confirmed",
			"dir", w.dir, "reasons", hold.Reasons, "domains", hold.Domains, "rules", refs(hold.Rules))
		if w.OnHold != nil {
			w.OnHold(hold)
		}
		return fmt.Errorf("%w: %s", ErrHeld, strings.Join(hold.Reasons, ", "))
	case err != nil:
		w.logger.Error("rules reload failed; keeping the last good rules", "dir", w.dir, "err", err)
	default:
		if len(removed.Domains) > 0 || len(removed.Rules) > 0 {
			w.logger.Warn("rules reloaded with removals", "dir", w.dir, "domains", removed.Domains, "rules", refs(removed.Rules))
		}
		w.logger.Info("rules reloaded", "dir", w.dir, "domains", len(s.Domains()), "rules", len(s.Rules()))
		if w.OnHold != nil {
			w.OnHold(nil)
		}
	}
	if w.OnReload != nil {
		w.OnReload(err == nil, err)
	}
	return err
}

// guard decides whether next may replace the rules in force (w.mu held):
// it returns the hold to keep (nil: apply), what next removes, and an
// error when the confirmation file cannot be read.
func (w *Watcher) guard(next *rules.Snapshot) (*rules.Hold, rules.Removal, error) {
	rm := rules.Removed(w.cur.Load(), next)
	g := w.Guard
	if g == nil || g.AllowRemoval || (len(rm.Domains) == 0 && len(rm.Rules) == 0) {
		return nil, rm, nil
	}
	allow, err := w.allowRemoval()
	if err != nil {
		return nil, rm, err
	}
	h := rules.Guard(rm, allow, g.InUse)
	if h == nil {
		return nil, rm, nil
	}
	now := g.now()
	h.Since = now
	if w.held != nil && w.held.Key() == h.Key() {
		h.Since = w.held.Since
		if g.Settle > 0 && now.Sub(h.Since) >= g.Settle {
			w.logger.Warn("rules: applying a held removal: unchanged for the settle time", "dir", w.dir, "settle", g.Settle)
			return nil, rm, nil
		}
	}
	w.held = h
	return h, rm, nil
}

// allowRemoval reads the confirmation file, if there is one.
func (w *Watcher) allowRemoval() (rules.AllowRemoval, error) {
	path := filepath.Join(w.dir, rules.AllowRemovalFile)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return rules.AllowRemoval{}, nil
	}
	if err != nil {
		return rules.AllowRemoval{}, rules.Errors{{File: path, Msg: err.Error()}}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, rules.MaxAllowRemovalBytes+1))
	if err != nil {
		return rules.AllowRemoval{}, rules.Errors{{File: path, Msg: err.Error()}}
	}
	return rules.ParseAllowRemoval(path, data)
}

func refs(rs []rules.RuleRef) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.String()
	}
	return out
}

// Run watches the directory and reloads after changes until ctx is done,
// then returns nil. It follows writes, creates, renames and removals of rule
// files and of the price table (rules.Options.PricesFile, wherever it is),
// and the symlink swap a Kubernetes ConfigMap volume does on update
// ("..data" pointed at a new timestamped directory). If the directory itself
// is a symlink, its parent is watched too, so replacing the link is seen. If
// the directory disappears, the last good rules stay in force (the failed
// reload is reported once) and Run looks for it every second until it is
// back. Changes made since New are not missed: the watch began before the
// first load. Run returns an error only if the file watcher fails.
func (w *Watcher) Run(ctx context.Context) error {
	fw, clean := w.fw, w.clean
	defer fw.Close()
	debounce := w.Debounce
	if debounce <= 0 {
		debounce = DefaultDebounce
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	lost := false // the directory could not be watched at the last attempt
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-fw.Events:
			if !ok {
				return errors.New("rules: file watcher closed")
			}
			if w.relevant(clean, ev.Name) {
				timer.Reset(debounce)
			}
		case err, ok := <-fw.Errors:
			if !ok {
				return errors.New("rules: file watcher closed")
			}
			w.logger.Warn("rules watch error", "dir", w.dir, "err", err)
			timer.Reset(debounce) // events may have been lost: look again
		case <-timer.C:
			// The directory may have been replaced (a symlink swapped, a
			// directory recreated); watching it again is harmless otherwise.
			// While it is missing, look for it again every second, without
			// reporting the same failure each time.
			if err := w.watch(fw); err != nil {
				if !lost {
					lost = true
					_ = w.Reload()
				}
				timer.Reset(time.Second)
				continue
			}
			lost = false
			_ = w.Reload()
			// A guard that applies a held removal after a settle time
			// must look again without a change to the files.
			if g := w.Guard; g != nil && g.Settle > 0 {
				if h := w.Held(); h != nil {
					timer.Reset(max(debounce, g.Settle-g.now().Sub(h.Since)))
				}
			}
		}
	}
}

// relevant reports whether a change to name may change the rules.
func (w *Watcher) relevant(dir, name string) bool {
	name = filepath.Clean(name)
	if name == dir {
		return true
	}
	if w.prices != "" && (name == w.prices || (filepath.Dir(name) == w.pricesDir && strings.HasPrefix(filepath.Base(name), ".."))) {
		return true // the price table, or its ConfigMap's swap
	}
	if filepath.Dir(name) != dir {
		return false // a sibling of a symlinked rules dir
	}
	base := filepath.Base(name)
	if base == rules.AllowRemovalFile {
		return true
	}
	if strings.HasPrefix(base, "..") { // ConfigMap: ..data, ..2026_01_01_…
		return true
	}
	ext := strings.ToLower(filepath.Ext(base))
	return !strings.HasPrefix(base, ".") && (ext == ".yaml" || ext == ".yml")
}
