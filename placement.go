package sluice

import "errors"

// Placement of a counter, as the first byte of its Op.Key: the engine
// (package service) writes it, a composed store (store/compose) routes by
// it. A key that starts with neither byte is placed global (the engine's
// global keys start with their hash tag's '{').
const (
	// KeyHybrid starts the keys of counters placed hybrid: decided from
	// local allotments of a global store.
	KeyHybrid byte = 'h'
	// KeyLocal starts the keys of counters placed local: decided by this
	// process alone.
	KeyLocal byte = 'l'
)

// ErrNoKeyLister: the store cannot list its keys (it is not a KeyLister,
// or a layer of it forwards Keys to a store that is not). Test with
// errors.Is.
var ErrNoKeyLister = errors.New("sluice: the store cannot list its keys")
