#!/bin/sh
# release.sh [VERSION]: builds the release artefacts into dist/VERSION/:
# sluice for linux and darwin on amd64 and arm64 (static, -trimpath,
# stamped with the version and the git revision, each as a .tar.gz), their
# SHA256SUMS, and the OCI image of deploy/image (a docker/podman-loadable
# tarball and an OCI layout, linux/amd64). VERSION defaults to
# `git describe --tags --always --dirty`. Set IMAGE to the repository to
# tag the image with (default ghcr.io/sluice-rl/sluice), NO_IMAGE=1 to skip
# it. Pushing is left to you (crane push, docker push): nothing leaves this
# machine.
set -eu
cd "$(dirname "$0")/.."
version=${1:-$(git describe --tags --always --dirty)}
version=${version#v}
revision=$(git rev-parse HEAD)
if [ -n "$(git status --porcelain)" ]; then revision="$revision+dirty"; fi
image=${IMAGE:-ghcr.io/sluice-rl/sluice}
out=dist/$version
rm -rf "$out"
mkdir -p "$out"
step=0
steps=6
[ "${NO_IMAGE:-}" = 1 ] && steps=5
say() { step=$((step + 1)); printf '[%d/%d] %s\n' "$step" "$steps" "$*" >&2; }
for target in linux/amd64 linux/arm64 darwin/amd64 darwin/arm64; do
	os=${target%/*} arch=${target#*/}
	name=sluice_${version}_${os}_${arch}
	say "building $name"
	start=$(date +%s)
	mkdir -p "$out/$name"
	CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -buildvcs=false \
		-ldflags "-s -w -X main.version=$version -X main.revision=$revision" \
		-o "$out/$name/sluice" ./cmd/sluice
	cp LICENSE README.md "$out/$name/"
	tar -C "$out" -czf "$out/$name.tar.gz" "$name"
	rm -r "${out:?}/$name"
	printf '      %s.tar.gz, %s bytes, %ss\n' "$name" "$(wc -c <"$out/$name.tar.gz" | tr -d ' ')" "$(($(date +%s) - start))" >&2
done
if [ "${NO_IMAGE:-}" != 1 ]; then
	say "building the OCI image $image:$version (deploy/image: compiles sluice for linux/amd64, lays the layers)"
	start=$(date +%s)
	abs=$(pwd)/$out
	(cd deploy && go run ./image -o "$abs/sluice_${version}_image.tar" -oci "$abs/oci-layout" \
		-tag "$image:$version" -version "$version")
	tar -C "$out" -czf "$out/sluice_${version}_oci-layout.tar.gz" oci-layout
	rm -r "${out:?}/oci-layout"
	printf '      done in %ss\n' "$(($(date +%s) - start))" >&2
fi
say "checksums"
(cd "$out" && sha256sum -- *.tar.gz *.tar 2>/dev/null >SHA256SUMS || sha256sum -- *.tar.gz >SHA256SUMS)
cat "$out/SHA256SUMS"
echo "release $version (revision $revision) in $out" >&2
