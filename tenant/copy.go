package tenant

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"
)

// The fleet's shared copy (Options.Copy): live registries write the
// snapshot there, so that an instance started while the Source is out of
// reach, with no snapshot file of its own (a new pod), enforces the
// fleet's tenants instead of the free tier.
//
// Writes are few: a live registry writes only when it has a change newer
// than the copy held (a change notified, the first full load of a
// session), or when the copy is older than Options.CopyRefresh; it first
// reads the copy's version (a few bytes), so of a fleet that sees the same
// change, the first to write it spares the others; and one registry writes
// at most once per Options.CopyEvery. The version is the writer's clock
// when it encoded a snapshot it was live with: instances whose clocks
// disagree by s seconds may keep a change out of the copy for up to s
// seconds after the writer that saw it last.

// copyTimeout bounds one read or write of the copy (a copy may be tens of
// MiB).
const copyTimeout = 30 * time.Second

// keepCopy writes the snapshot to Options.Copy when it changes, at most
// once per Options.CopyEvery, until ctx is done.
func (g *Registry) keepCopy(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.copyDirty:
		}
		if !g.writeCopy(ctx) {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(g.opts.CopyEvery):
		}
	}
}

// writeCopy writes the snapshot to the copy if this registry is live and
// the copy held lacks a change this registry has, or is older than
// Options.CopyRefresh. It reports whether it tried to write.
func (g *Registry) writeCopy(ctx context.Context) bool {
	g.mu.Lock()
	live, changedAt := g.status.Live, g.changedAt
	g.mu.Unlock()
	if !live { // only data loaded from the source goes to the copy
		return false
	}
	snap := g.snap.Load()
	ctx, cancel := context.WithTimeout(ctx, copyTimeout)
	defer cancel()
	held, err := g.opts.Copy.Version(ctx)
	if err != nil {
		g.copyFailed(fmt.Errorf("%w: version: %w", ErrCopy, err))
		return false
	}
	now := g.opts.Now().UnixMicro()
	if held >= changedAt && now-held < g.opts.CopyRefresh.Microseconds() {
		return false // the copy has what this registry knows, and is recent
	}
	var buf bytes.Buffer
	if err := WriteSnapshot(&buf, snap, g.opts.CopyMaxBytes); err != nil {
		if errors.Is(err, ErrFileTooLarge) {
			err = fmt.Errorf("%w: the snapshot is over the shared copy's %d bytes, not written (the copy held stays)", ErrFileTooLarge, g.opts.CopyMaxBytes)
		}
		g.copyFailed(fmt.Errorf("%w: %w", ErrCopy, err))
		return true
	}
	stored, err := g.opts.Copy.Put(ctx, now, buf.Bytes())
	if err != nil {
		g.copyFailed(fmt.Errorf("%w: put: %w", ErrCopy, err))
		return true
	}
	g.setStatus(func(s *Status) {
		s.CopyErr = nil
		if stored {
			s.CopyWritten = g.opts.Now()
		}
	})
	return true
}

func (g *Registry) copyFailed(err error) {
	g.setStatus(func(s *Status) { s.CopyErr = err })
	g.opts.OnError(err)
}

// restoreCopy reads the copy once the source has failed, or has not been
// loaded within Options.CopyWait, and again with backoff until a read
// succeeds and something is in force, or a full load completes. Each
// failure goes to Options.OnError.
func (g *Registry) restoreCopy(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-g.synced:
		return
	case <-g.failed:
	case <-time.After(g.opts.CopyWait):
	}
	wait := g.opts.RetryMin
	for {
		_, err := g.RestoreCopy(ctx)
		if err == nil && g.Loaded() {
			return
		}
		if err != nil && ctx.Err() == nil {
			g.opts.OnError(err)
		}
		// A failure, or no copy yet with nothing in force: a live
		// instance of the fleet may write one.
		select {
		case <-ctx.Done():
			return
		case <-g.synced:
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, g.opts.RetryMax)
	}
}

// RestoreCopy reads Options.Copy and puts it in force, as Restore does the
// file, when no full load has completed and the copy is newer than the
// snapshot in force: its version against the file's DataAt or an earlier
// copy's version. Status.CopyRead records what it found. It returns
// whether the copy is now in force, and an error when the copy could not
// be read, is larger than Options.CopyMaxBytes or does not decode (the
// registry keeps what it has; a copy refused is not fetched again until
// its version changes). Run calls it; call it yourself only without Run.
func (g *Registry) RestoreCopy(ctx context.Context) (bool, error) {
	if g.opts.Copy == nil {
		return false, errors.New("tenant: RestoreCopy: no Options.Copy")
	}
	ctx, cancel := context.WithTimeout(ctx, copyTimeout)
	defer cancel()
	fail := func(err error) (bool, error) {
		err = fmt.Errorf("%w: %w", ErrCopy, err)
		g.setStatus(func(s *Status) { s.CopyErr = err })
		return false, err
	}
	held, err := g.opts.Copy.Version(ctx)
	if err != nil {
		return fail(fmt.Errorf("version: %w", err))
	}
	found := func(what string) (bool, error) {
		g.setStatus(func(s *Status) { s.CopyRead, s.CopyErr = what, nil })
		return false, nil
	}
	if held == 0 {
		return found(CopyNone)
	}
	g.mu.Lock()
	inForce, bad, synced := g.freshness(), g.badCopy, g.status.Synced
	g.mu.Unlock()
	if synced {
		return false, nil
	}
	if held <= inForce {
		return found(CopyOlder)
	}
	if held == bad {
		return fail(fmt.Errorf("version %d was refused before", held))
	}
	v, data, err := g.opts.Copy.Get(ctx, g.opts.CopyMaxBytes)
	if err != nil {
		return fail(fmt.Errorf("get: %w", err))
	}
	if data == nil {
		return found(CopyNone)
	}
	snap, err := ReadSnapshot(bytes.NewReader(data), "shared copy", g.opts.CopyMaxBytes)
	if err != nil {
		g.mu.Lock()
		g.badCopy = v
		g.mu.Unlock()
		return fail(err)
	}
	g.mu.Lock()
	if g.status.Synced {
		g.mu.Unlock()
		return false, nil
	}
	if v <= g.freshness() {
		g.status.CopyRead, g.status.CopyErr = CopyOlder, nil
		g.mu.Unlock()
		return false, nil
	}
	g.snap.Store(snap)
	g.copyVersion = v
	was := g.status.Source
	g.status.Source, g.status.DataAt = SourceCopy, snap.At()
	g.status.CopyRead, g.status.CopyErr = CopyRestored, nil
	g.loaded.Store(true)
	g.mu.Unlock()
	g.sourceChanged(was)
	return true, nil
}

// freshness is how current the snapshot in force is known to be, in Unix
// µs, to compare with a copy's version: a copy's own version, the file's
// DataAt (when its data was read from the source), 0 for none. mu must be
// held.
func (g *Registry) freshness() int64 {
	switch g.status.Source {
	case SourceCopy:
		return g.copyVersion
	case SourceFile:
		return g.status.DataAt.UnixMicro()
	}
	return 0
}
