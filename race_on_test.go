//go:build race

package sluice_test

// raceBuild says this test binary was built with -race.
const raceBuild = true
