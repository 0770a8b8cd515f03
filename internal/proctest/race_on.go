//go:build race

package proctest

// raceBuild says the binary was built with -race.
const raceBuild = true
