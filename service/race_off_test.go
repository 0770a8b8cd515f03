//go:build !race

package service

// raceOn: the race detector is on (sync.Pool then drops items at random,
// so allocation counts vary).
const raceOn = false
