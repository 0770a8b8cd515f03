// Command image builds Sluice's OCI image without a container engine: a
// static binary (CGO_ENABLED=0) on an empty base, run as a non-root user,
// with no shell and nothing else but the example rules, the CA bundle of the
// build host and an /etc/passwd naming the user. It writes a tarball that
// `docker load`, `podman load` and `crane push` take, and optionally an OCI
// image layout directory.
//
//	cd deploy && go run ./image -o sluice.tar [-tag ghcr.io/sluice-rl/sluice:0.1.0] [-oci dir]
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// uid and gid of the user the image runs as (the "nonroot" of distroless).
const uid, gid = 65532, 65532

// options says what to build.
type options struct {
	repo    string // the module root, holding cmd/sluice and examples/rules
	version string // stamped into the binary (main.version)
	arch    string // GOARCH
	caFile  string // CA bundle to include; "" for none
	created time.Time
}

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "sluice.tar", "write the image as a tarball (docker load / podman load) here")
	oci := fs.String("oci", "", "also write an OCI image layout to this directory")
	tag := fs.String("tag", "ghcr.io/sluice-rl/sluice:dev", "reference recorded in the tarball")
	o := options{repo: "..", arch: "amd64", caFile: "/etc/ssl/certs/ca-certificates.crt"}
	fs.StringVar(&o.repo, "repo", o.repo, "the Sluice module root")
	fs.StringVar(&o.version, "version", "", "version stamped into the binary (default: the tag's)")
	fs.StringVar(&o.arch, "arch", o.arch, "GOARCH of the image")
	fs.StringVar(&o.caFile, "ca", o.caFile, `CA bundle copied to /etc/ssl/certs/ca-certificates.crt ("" for none)`)
	if err := fs.Parse(args); err != nil {
		return err
	}
	ref, err := name.NewTag(*tag)
	if err != nil {
		return fmt.Errorf("-tag: %w", err)
	}
	if o.version == "" {
		o.version = ref.TagStr()
	}
	img, err := build(ctx, o)
	if err != nil {
		return err
	}
	if err := tarball.WriteToFile(*out, ref, img); err != nil {
		return fmt.Errorf("write %s: %w", *out, err)
	}
	if *oci != "" {
		p, err := layout.Write(*oci, empty.Index)
		if err != nil {
			return fmt.Errorf("-oci: %w", err)
		}
		if err := p.AppendImage(img); err != nil {
			return fmt.Errorf("-oci: %w", err)
		}
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "image %s (%s) written to %s\n", ref, d, *out)
	return nil
}

// build compiles the binary and assembles the image.
func build(ctx context.Context, o options) (v1.Image, error) {
	if o.created.IsZero() {
		o.created = time.Unix(0, 0).UTC() // reproducible: the same inputs give the same digest
	}
	tmp, err := os.MkdirTemp("", "sluice-image")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "sluice")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false",
		"-ldflags", "-s -w -X main.version="+o.version, "-o", bin, "./cmd/sluice")
	cmd.Dir = o.repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+o.arch)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build: %w\n%s", err, msg)
	}
	files := map[string]file{}
	b, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	files["usr/local/bin/sluice"] = file{b, 0o755}
	files["etc/passwd"] = file{[]byte(fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", uid, gid)), 0o644}
	files["etc/group"] = file{[]byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", gid)), 0o644}
	if o.caFile != "" {
		ca, err := os.ReadFile(o.caFile)
		if err != nil {
			return nil, fmt.Errorf("-ca: %w", err)
		}
		files["etc/ssl/certs/ca-certificates.crt"] = file{ca, 0o644}
	}
	rules, err := filepath.Glob(filepath.Join(o.repo, "examples", "rules", "*.yaml"))
	if err != nil || len(rules) == 0 {
		return nil, fmt.Errorf("no example rules under %s/examples/rules", o.repo)
	}
	for _, r := range rules {
		b, err := os.ReadFile(r)
		if err != nil {
			return nil, err
		}
		files["etc/sluice/rules/"+filepath.Base(r)] = file{b, 0o644}
	}
	layerTar, err := tarOf(files, o.created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: o.created}, CreatedBy: "deploy/image: sluice " + o.version, Comment: "static binary, example rules, CA bundle, passwd",
	}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", o.arch, v1.Time{Time: o.created}
	cf.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", uid, gid),
		Entrypoint: []string{"/usr/local/bin/sluice"},
		// Listeners on every interface: in a container, loopback is useless.
		Cmd:          []string{"serve", "--rules=/etc/sluice/rules", "--grpc-addr=:8081", "--http-addr=:8080", "--debug-addr=off", "--log-format=json"},
		WorkingDir:   "/",
		Env:          []string{"PATH=/usr/local/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
		ExposedPorts: map[string]struct{}{"8080/tcp": {}, "8081/tcp": {}},
		Labels: map[string]string{
			"org.opencontainers.image.title":    "sluice",
			"org.opencontainers.image.version":  o.version,
			"org.opencontainers.image.source":   "https://github.com/sluice-rl/sluice",
			"org.opencontainers.image.licenses": "Apache-2.0",
		},
	}
	return mutate.ConfigFile(img, cf)
}

type file struct {
	data []byte
	mode int64
}

// tarOf writes files (and their parent directories) into one layer, owned
// by root and read-only to the runtime user except where mode says.
func tarOf(files map[string]file, mtime time.Time) ([]byte, error) {
	var names []string
	dirs := map[string]bool{}
	for n := range files {
		names = append(names, n)
		for d := filepath.Dir(n); d != "."; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	dirs["tmp"], dirs["home/nonroot"], dirs["home"] = true, true, true
	var all []string
	for d := range dirs {
		all = append(all, d+"/")
	}
	all = append(all, names...)
	sort.Strings(all)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range all {
		h := &tar.Header{Name: n, ModTime: mtime, Format: tar.FormatPAX}
		if strings.HasSuffix(n, "/") {
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
			switch n {
			case "tmp/":
				h.Mode = 0o1777
			case "home/nonroot/":
				h.Uid, h.Gid, h.Mode = uid, gid, 0o700
			}
		} else {
			f := files[n]
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, f.mode, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(files[n].data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

var errNotFound = errors.New("not found")
