package proctest

import (
	"flag"
	"os"
	"syscall"
)

// Exit ends a test binary with code, the result of m.Run, in TestMain:
// func TestMain(m *testing.M) { proctest.Exit(m.Run()) }.
//
// It is os.Exit, except that a passing binary built with -race exits
// without the race runtime's sleep at exit (a second per test binary, in
// which the race detector only waits for other threads' reports; a race
// in a test has already failed it, and one outside the tests has made
// m.Run return 1). A failing run, or one writing coverage, exits through
// os.Exit.
func Exit(code int) {
	if code != 0 || !raceBuild || covering() {
		os.Exit(code)
	}
	syscall.Exit(0)
}

// covering reports whether go test asked this binary for coverage.
func covering() bool {
	for _, name := range []string{"test.coverprofile", "test.gocoverdir"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" {
			return true
		}
	}
	return false
}
