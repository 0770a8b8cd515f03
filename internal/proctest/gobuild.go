package proctest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// buildLockName is the file, in os.TempDir(), that GoBuild holds locked
// while the go command builds.
const buildLockName = "sluice-go-build.lock"

// GoBuild runs `go build args...` in dir ("" for the caller's) and returns
// its combined output. One GoBuild runs at a time on a machine (a lock file
// in os.TempDir(), held across processes): go test runs packages in
// parallel, and several of them (cmd/sluice, internal/e2e, internal/proof,
// the docs' blocks) build the same program; built one after another, the
// second finds the first's packages in the build cache, where built at the
// same time each compiled every dependency (on a fresh cache, minutes of
// CPU each). A build that cannot take the lock runs without it. Safe for
// concurrent use.
func GoBuild(dir string, args ...string) ([]byte, error) {
	unlock := lockBuild()
	defer unlock()
	cmd := exec.Command("go", append([]string{"build"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("go build: %w", err)
	}
	return out, nil
}

// lockBuild takes the build lock, waiting for it, and returns its release.
func lockBuild() (unlock func()) {
	f, err := os.OpenFile(filepath.Join(os.TempDir(), buildLockName), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return func() {}
	}
	if !flock(f) {
		f.Close()
		return func() {}
	}
	return func() { f.Close() } // closing the file releases the lock
}
