package fleet

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
)

// Program runs f as a test would run it, outside go test (sluice-bench
// proof): f runs in a goroutine of its own; t.Fatal, t.FailNow or t.Skip
// end it and come back as the error; t.Error marks it failed and goes on;
// the cleanups run, last first, when f ends; t.Log goes to logf.
//
// The stand-in implements the methods of testing.TB that this package,
// internal/redistest and internal/pgtest call (Helper, Log, Logf, Error,
// Errorf, Fatal, Fatalf, Fail, FailNow, Failed, Skip, Skipf, SkipNow,
// Skipped, Cleanup, TempDir, Name); any other panics.
func Program(name string, logf func(format string, args ...any), f func(t TB)) error {
	p := &programTB{name: name, logf: logf}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(p)
	}()
	<-done
	p.runCleanups()
	p.mu.Lock()
	defer p.mu.Unlock()
	return errors.Join(p.errs...)
}

type programTB struct {
	testing.TB // nil: methods not overridden below panic
	name       string
	logf       func(string, ...any)

	mu       sync.Mutex
	errs     []error
	failed   bool
	skipped  bool
	cleanups []func()
}

func (p *programTB) Helper()      {}
func (p *programTB) Name() string { return p.name }

func (p *programTB) Log(args ...any) { p.logf("%s", fmt.Sprint(args...)) }

func (p *programTB) Logf(format string, args ...any) { p.logf(format, args...) }

func (p *programTB) Error(args ...any) { p.fail(errors.New(fmt.Sprint(args...))) }

func (p *programTB) Errorf(format string, args ...any) { p.fail(fmt.Errorf(format, args...)) }

func (p *programTB) Fatal(args ...any) { p.Error(args...); runtime.Goexit() }

func (p *programTB) Fatalf(format string, args ...any) { p.Errorf(format, args...); runtime.Goexit() }

func (p *programTB) Fail() { p.fail(nil) }

func (p *programTB) FailNow() { p.fail(nil); runtime.Goexit() }

func (p *programTB) Failed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failed
}

func (p *programTB) Skip(args ...any) {
	p.skip(fmt.Sprint(args...))
	runtime.Goexit()
}

func (p *programTB) Skipf(format string, args ...any) {
	p.skip(fmt.Sprintf(format, args...))
	runtime.Goexit()
}

func (p *programTB) SkipNow() { p.skip("skipped"); runtime.Goexit() }

func (p *programTB) Skipped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.skipped
}

// skip is a failure here: a program asked to run the matrix did not.
func (p *programTB) skip(msg string) {
	p.mu.Lock()
	p.skipped = true
	p.mu.Unlock()
	p.fail(fmt.Errorf("cannot run: %s", msg))
}

func (p *programTB) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failed = true
	if err != nil {
		p.errs = append(p.errs, err)
	}
}

func (p *programTB) Cleanup(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cleanups = append(p.cleanups, f)
}

func (p *programTB) runCleanups() {
	for {
		p.mu.Lock()
		n := len(p.cleanups)
		if n == 0 {
			p.mu.Unlock()
			return
		}
		f := p.cleanups[n-1]
		p.cleanups = p.cleanups[:n-1]
		p.mu.Unlock()
		done := make(chan struct{})
		go func() { // a cleanup that calls Fatal ends its own goroutine only
			defer close(done)
			f()
		}()
		<-done
	}
}

func (p *programTB) TempDir() string {
	dir, err := os.MkdirTemp("", "sluice-proof-")
	if err != nil {
		p.Fatalf("fleet: %v", err)
	}
	p.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}
