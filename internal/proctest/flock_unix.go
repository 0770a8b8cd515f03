//go:build unix

package proctest

import (
	"os"
	"syscall"
)

// flock waits for an exclusive lock on f and reports whether it holds it.
func flock(f *os.File) bool {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			return err == nil
		}
	}
}
