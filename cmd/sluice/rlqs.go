package main

import (
	"fmt"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/server/rlqs"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/compose"
)

// registerRLQS serves Envoy's rate limit quota service on the gRPC server
// (docs/rlqs.md). Buckets of rules are leased from the store; a store that
// cannot lease (sluice.Allotter) serves every bucket --rlqs-unmatched.
func (s *server) registerRLQS(limits service.Limits) error {
	un, err := rlqs.ParseUnmatched(s.cfg.Listen.RLQSUnmatched)
	if err != nil {
		return fmt.Errorf("--rlqs-unmatched: %w", err)
	}
	log := s.log.With("component", "rlqs")
	var allotter sluice.Allotter
	if a, ok := s.store.(sluice.Allotter); ok && s.cfg.Store.Kind == compose.KindRedis {
		allotter = a // the stack's Allot is the Redis store's
	}
	s.rlqs, err = rlqs.New(s.engine, s.watcher, rlqs.Options{Unmatched: un, Limits: limits, Logger: log, Allotter: allotter})
	if err != nil {
		return err
	}
	if allotter == nil {
		log.Info("the store cannot lease allotments: RLQS buckets get the --rlqs-unmatched assignment", "rlqs_unmatched", s.cfg.Listen.RLQSUnmatched)
	}
	s.rlqs.Register(s.grpc)
	return nil
}
