#!/usr/bin/env bash
# Builds the CNCF distribution registry (cmd/registry, the version
# hack/tools-registry requires) into _output/bin/registry, only when missing
# or when the tools module names another version. internal/localregistry
# runs it on loopback for tests that pull images. It is a module of its own
# because the registry brings some 100 modules (cloud storage drivers,
# tracing, redis) the library does not need. The binary is also kept in
# $NODEKIT_CACHE (default /var/cache/nodekit) per version, so a fresh clone
# on the same machine copies it instead of rebuilding. Called by
# hack/build-tools.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=$root/_output/bin
name=registry
version=$(cd hack/tools-registry && go list -m -f '{{.Version}}' github.com/distribution/distribution/v3)
cache=${NODEKIT_CACHE:-/var/cache/nodekit}/$name-$version
mkdir -p "$out"
mkdir -p "$cache" 2>/dev/null || cache=""

# A stamp beside the binary says which version it is, so that a bump in
# the tools module rebuilds it.
if [ -x "$out/$name" ] && [ "$(cat "$out/.$name.version" 2>/dev/null)" = "$version" ]; then
  exit 0
fi
if [ -n "$cache" ] && [ -x "$cache/$name" ]; then
  cp "$cache/$name" "$out/$name.tmp" && mv "$out/$name.tmp" "$out/$name"
  echo "$version" >"$out/.$name.version"
  echo "build-registry: $name $version from $cache"
  exit 0
fi
echo "build-registry: building $name $version"
start=$SECONDS
# registry --version prints this; without it it says "v3.0.0+unknown".
ldflags="-X github.com/distribution/distribution/v3/version.version=$version"
(cd hack/tools-registry && CGO_ENABLED=0 nice go build -trimpath -ldflags "$ldflags" \
  -o "$out/$name.tmp" github.com/distribution/distribution/v3/cmd/registry)
mv "$out/$name.tmp" "$out/$name"
echo "$version" >"$out/.$name.version"
echo "build-registry: built $name in $((SECONDS - start))s"
if [ -n "$cache" ]; then
  cp "$out/$name" "$cache/$name.tmp" && mv "$cache/$name.tmp" "$cache/$name"
fi
