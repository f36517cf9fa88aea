#!/usr/bin/env bash
# Builds golangci-lint (the version hack/tools-lint requires) into
# _output/bin, only when missing or when the tools module names another
# version. The binary is also kept in $NODEKIT_CACHE (default
# /var/cache/nodekit) per version, so a fresh clone on the same machine
# copies it instead of rebuilding: a cold build compiles some 300 packages
# and takes minutes on 2 cores, so it runs under nice.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=$root/_output/bin
name=golangci-lint
version=$(cd hack/tools-lint && go list -m -f '{{.Version}}' github.com/golangci/golangci-lint/v2)
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
  echo "build-lint: $name $version from $cache"
  exit 0
fi
echo "build-lint: building $name $version; the first build takes minutes"
start=$SECONDS
# golangci-lint --version prints these; without them it says "dev".
ldflags="-X main.version=${version#v} -X main.commit=module -X main.date=unknown"
(cd hack/tools-lint && CGO_ENABLED=0 nice go build -trimpath -ldflags "$ldflags" \
  -o "$out/$name.tmp" github.com/golangci/golangci-lint/v2/cmd/golangci-lint)
mv "$out/$name.tmp" "$out/$name"
echo "$version" >"$out/.$name.version"
echo "build-lint: built $name in $((SECONDS - start))s"
if [ -n "$cache" ]; then
  cp "$out/$name" "$cache/$name.tmp" && mv "$cache/$name.tmp" "$cache/$name"
fi
