#!/usr/bin/env bash
# Builds containerd 2 (cmd/containerd and cmd/containerd-shim-runc-v2, from
# hack/tools-containerd) and a runc new enough for user namespaces (from
# hack/tools-runc) into _output/bin/containerd2, only when missing. Tests
# run them with NODEKIT_CONTAINERD=2, beside Debian's containerd 1.6, which
# keeps its own shim and runc: internal/localcri puts this directory on the
# PATH of the containerd 2 process only. The versions are those the two
# tools modules require; binaries are also kept in $NODEKIT_CACHE (default
# /var/cache/nodekit) per version, so a fresh clone does not rebuild them.
# Called by hack/build-tools.sh; needs libseccomp-dev and pkg-config
# (hack/install-deps.sh) for runc's seccomp support.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=$root/_output/bin/containerd2

modversion() { # module-dir module-path
  (cd "$1" && go list -m -f '{{.Version}}' "$2")
}
ctrd_version=$(modversion hack/tools-containerd github.com/containerd/containerd/v2)
runc_version=$(modversion hack/tools-runc github.com/opencontainers/runc)
mkdir -p "$out"

# build name version module-dir package cgo tags [ldflags]
build() {
  local name=$1 version=$2 moddir=$3 pkg=$4 cgo=$5 tags=$6 ldflags=${7:-}
  local cache=${NODEKIT_CACHE:-/var/cache/nodekit}/${name%%-*}-$version
  mkdir -p "$cache" 2>/dev/null || cache=""
  # A stamp beside the binary says which version it is, so that a bump in
  # the tools module rebuilds it.
  if [ -x "$out/$name" ] && [ "$(cat "$out/.$name.version" 2>/dev/null)" = "$version" ]; then
    return
  fi
  if [ -n "$cache" ] && [ -x "$cache/$name" ]; then
    cp "$cache/$name" "$out/$name.tmp" && mv "$out/$name.tmp" "$out/$name"
    echo "$version" >"$out/.$name.version"
    echo "build-containerd2: $name $version from $cache"
    return
  fi
  echo "build-containerd2: building $name $version ($pkg)"
  local start=$SECONDS
  (cd "$moddir" && CGO_ENABLED=$cgo go build -trimpath -tags "$tags" -ldflags "$ldflags" -o "$out/$name.tmp" "$pkg")
  mv "$out/$name.tmp" "$out/$name"
  echo "$version" >"$out/.$name.version"
  echo "build-containerd2: built $name in $((SECONDS - start))s"
  if [ -n "$cache" ]; then
    cp "$out/$name" "$cache/$name.tmp" && mv "$cache/$name.tmp" "$cache/$name"
  fi
}

ctrd_tags="no_btrfs no_devmapper no_zfs"
# containerd and its shim report this version (containerd --version, CRI
# Version); without it they say "1.7.0+unknown"-style placeholders.
ctrd_ldflags="-X github.com/containerd/containerd/v2/version.Version=$ctrd_version"
build containerd "$ctrd_version" hack/tools-containerd github.com/containerd/containerd/v2/cmd/containerd 0 "$ctrd_tags" "$ctrd_ldflags"
build containerd-shim-runc-v2 "$ctrd_version" hack/tools-containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 0 "$ctrd_tags" "$ctrd_ldflags"
if ! pkg-config --exists libseccomp 2>/dev/null; then
  echo "build-containerd2: runc needs libseccomp-dev and pkg-config (bash hack/install-deps.sh)" >&2
  exit 1
fi
# runc prints this version (runc --version), which containerd logs.
runc_ldflags="-X main.version=${runc_version#v}"
build runc "$runc_version" hack/tools-runc github.com/opencontainers/runc 1 seccomp "$runc_ldflags"
