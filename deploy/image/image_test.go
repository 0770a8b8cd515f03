package main

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestImage builds the image as `go run ./image` does, reads it back from
// the tarball and checks what a platform team relies on: a non-root user, no
// shell, a static binary that runs, the listeners on every interface, the
// example rules where the default command looks for them.
func TestImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the sluice binary; skipped with -short")
	}
	out := filepath.Join(t.TempDir(), "sluice.tar")
	var log bytes.Buffer
	if err := run(context.Background(), []string{"-o", out, "-tag", "example.com/sluice:1.2.3", "-repo", "../.."}, &log); err != nil {
		t.Fatalf("build: %v\n%s", err, log.String())
	}
	img, err := tarball.ImageFromPath(out, nil)
	if err != nil {
		t.Fatalf("read back: %v", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User == "" || strings.HasPrefix(c.User, "0") || strings.HasPrefix(c.User, "root") {
		t.Errorf("User = %q, want a non-root uid", c.User)
	}
	if want := []string{"/usr/local/bin/sluice"}; !slices.Equal(c.Entrypoint, want) {
		t.Errorf("Entrypoint = %q, want %q", c.Entrypoint, want)
	}
	for _, want := range []string{"serve", "--rules=/etc/sluice/rules", "--grpc-addr=:8081", "--http-addr=:8080"} {
		if !slices.Contains(c.Cmd, want) {
			t.Errorf("Cmd = %q, lacks %q", c.Cmd, want)
		}
	}
	if _, ok := c.ExposedPorts["8081/tcp"]; !ok {
		t.Errorf("ExposedPorts = %v, want 8081/tcp", c.ExposedPorts)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("platform = %s/%s, want linux/amd64", cf.OS, cf.Architecture)
	}
	if got := c.Labels["org.opencontainers.image.version"]; got != "1.2.3" {
		t.Errorf("version label = %q, want 1.2.3", got)
	}

	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(tr)
			files[strings.TrimSuffix(h.Name, "/")] = b
			if h.Typeflag == tar.TypeSymlink || h.Typeflag == tar.TypeLink {
				t.Errorf("%s is a link; the image holds none", h.Name)
			}
		}
		rc.Close()
	}
	for _, shell := range []string{"bin/sh", "bin/bash", "bin/busybox", "usr/bin/sh", "bin"} {
		if _, ok := files[shell]; ok {
			t.Errorf("the image holds %s; want no shell", shell)
		}
	}
	if !strings.Contains(string(files["etc/passwd"]), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd does not name uid 65532:\n%s", files["etc/passwd"])
	}
	if len(files["etc/sluice/rules/edge.yaml"]) == 0 {
		t.Errorf("the example rules are not at /etc/sluice/rules")
	}
	bin := files["usr/local/bin/sluice"]
	ef, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		t.Fatalf("the binary is not ELF: %v", err)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the binary asks for a dynamic loader: it is not static")
		}
	}
	// It runs, and says the version it was stamped with.
	exe := filepath.Join(t.TempDir(), "sluice")
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := exec.Command(exe, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(got), "1.2.3") {
		t.Errorf("sluice version = %q, %v; want it to name 1.2.3", got, err)
	}
}
