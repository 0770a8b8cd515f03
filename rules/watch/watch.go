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
	"log/slog"
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

	dir    string
	opts   rules.Options
	logger *slog.Logger
	cur    atomic.Pointer[rules.Snapshot]
	fw     *fsnotify.Watcher
	clean  string // filepath.Clean(dir)

	mu         sync.Mutex // serializes reloads; guards lastErr and lastReload
	lastErr    error
	lastReload time.Time
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
// so that replacing the link is seen.
func (w *Watcher) watch(fw *fsnotify.Watcher) error {
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

// Reload loads the directory now. On success it swaps in the new snapshot;
// on failure it keeps the current one. Either way it records the outcome,
// logs it, calls OnReload, and returns the load's error.
func (w *Watcher) Reload() error {
	w.mu.Lock()
	s, err := rules.LoadDir(w.dir, w.opts)
	if err == nil {
		w.cur.Store(s)
		w.lastReload = time.Now()
	}
	w.lastErr = err
	w.mu.Unlock()
	if err != nil {
		w.logger.Error("rules reload failed; keeping the last good rules", "dir", w.dir, "err", err)
	} else {
		w.logger.Info("rules reloaded", "dir", w.dir, "domains", len(s.Domains()), "rules", len(s.Rules()))
	}
	if w.OnReload != nil {
		w.OnReload(err == nil, err)
	}
	return err
}

// Run watches the directory and reloads after changes until ctx is done,
// then returns nil. It follows writes, creates, renames and removals of rule
// files, and the symlink swap a Kubernetes ConfigMap volume does on update
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
			if err := fw.Add(w.dir); err != nil {
				if !lost {
					lost = true
					_ = w.Reload()
				}
				timer.Reset(time.Second)
				continue
			}
			lost = false
			_ = w.Reload()
		}
	}
}

// relevant reports whether a change to name may change the rules.
func (w *Watcher) relevant(dir, name string) bool {
	name = filepath.Clean(name)
	if name == dir {
		return true
	}
	if filepath.Dir(name) != dir {
		return false // a sibling of a symlinked rules dir
	}
	base := filepath.Base(name)
	if strings.HasPrefix(base, "..") { // ConfigMap: ..data, ..2026_01_01_…
		return true
	}
	ext := strings.ToLower(filepath.Ext(base))
	return !strings.HasPrefix(base, ".") && (ext == ".yaml" || ext == ".yml")
}
