#!/usr/bin/env bash
# Builds the upstream binaries nodekit's tests run against — kube-apiserver
# v1.37.2 (version-stamped) and agnhost (static) — from the hack/tools
# module into _output/bin, and containerd 2 with its shim and runc
# (hack/build-containerd2.sh) into _output/bin/containerd2, only when
# missing. With the argument
# "conformance" it also builds what the conformance harness and the
# benchmark against kubelet need: kube-controller-manager, kube-scheduler,
# kubelet, the e2e test binary and ginkgo. Built binaries are also kept
# in a machine-wide cache ($NODEKIT_CACHE, default /var/cache/nodekit) so a
# fresh clone on the same machine does not rebuild them.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
version=v1.37.2
bin=$root/_output/bin
cache=${NODEKIT_CACHE:-/var/cache/nodekit}/$version
mkdir -p "$bin"
mkdir -p "$cache" 2>/dev/null || cache=""

ldflags="-X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37"

build() { # name package cgo [test]
  local name=$1 pkg=$2 cgo=$3 kind=${4:-}
  if [ -x "$bin/$name" ]; then
    return
  fi
  if [ -n "$cache" ] && [ -x "$cache/$name" ]; then
    cp "$cache/$name" "$bin/$name"
    echo "build-tools: $name from $cache"
    return
  fi
  echo "build-tools: building $name ($pkg); the first build takes minutes"
  local start=$SECONDS
  if [ "$kind" = test ]; then
    (cd hack/tools && CGO_ENABLED=$cgo go test -c -trimpath -ldflags "$ldflags" -o "$bin/$name.tmp" "$pkg")
  else
    (cd hack/tools && CGO_ENABLED=$cgo go build -trimpath -ldflags "$ldflags" -o "$bin/$name.tmp" "$pkg")
  fi
  mv "$bin/$name.tmp" "$bin/$name"
  echo "build-tools: built $name in $((SECONDS - start))s"
  if [ -n "$cache" ]; then
    cp "$bin/$name" "$cache/$name.tmp" && mv "$cache/$name.tmp" "$cache/$name"
  fi
}

build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver 1
build agnhost k8s.io/kubernetes/test/images/agnhost 0
# containerd 2, its shim and runc into _output/bin/containerd2, for the
# test pass on containerd 2 (NODEKIT_CONTAINERD=2).
bash hack/build-containerd2.sh

if [ "${1:-}" = conformance ]; then
  build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager 1
  build kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler 1
  build kubelet k8s.io/kubernetes/cmd/kubelet 1
  build ginkgo github.com/onsi/ginkgo/v2/ginkgo 0
  build e2e.test k8s.io/kubernetes/test/e2e 1 test
fi
