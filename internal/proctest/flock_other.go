//go:build !unix

package proctest

import "os"

// flock takes no lock where flock(2) is not available: builds run at once.
func flock(*os.File) bool { return false }
