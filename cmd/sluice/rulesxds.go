package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/rules/watch"
	"github.com/sluice-rl/sluice/rules/xds"
)

// ruleSource is where serve takes its rules from: a watched directory
// (*watch.Watcher) or an xDS management server (*xds.Client, --rules-xds).
type ruleSource interface {
	Current() *rules.Snapshot
	LastError() error
	LastReload() time.Time
	Run(ctx context.Context) error
}

// newRuleSource returns the xDS client when cfg.XDS is set (the directory
// is then not read), else the directory watcher, which loads it at once.
// observe is told of every reload or update.
func newRuleSource(cfg rulesConfig, opts rules.Options, observe func(ok bool, err error), log *slog.Logger) (ruleSource, error) {
	if cfg.XDS != "" {
		c, err := xds.New(cfg.XDS, cfg.XDSNode, opts, log)
		if err != nil {
			return nil, err
		}
		c.OnUpdate = func(_ string, err error) { observe(err == nil, err) }
		return c, nil
	}
	w, err := watch.New(cfg.Dir, opts, log)
	if err != nil {
		return nil, err
	}
	w.OnReload = observe
	return w, nil
}
