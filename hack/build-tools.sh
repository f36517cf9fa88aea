#!/usr/bin/env bash
# Builds the upstream binaries nodekit's tests run against from the
# hack/tools module into _output/bin, only when missing:
#
#   hack/build-tools.sh              kube-apiserver (version-stamped),
#                                    kube-controller-manager, kube-scheduler,
#                                    agnhost (static) and kubelet: what
#                                    `make test` needs
#   hack/build-tools.sh conformance  also the e2e test binary and ginkgo (the
#                                    conformance harness and the benchmark)
#   hack/build-tools.sh NAME...      just those binaries, e.g. `kubelet`, or
#                                    `containerd2` (containerd 2, its shim
#                                    and runc: hack/build-containerd2.sh) or
#                                    `registry` (the distribution registry:
#                                    hack/build-registry.sh) or `busybox`
#                                    (upstream busybox, static, C:
#                                    hack/build-busybox.sh) or `vm` (the
#                                    cgroup v2 guest image:
#                                    hack/build-vm.sh)
#
# With no argument or "conformance" it also builds containerd2 into
# _output/bin/containerd2, for the test pass on containerd 2, the
# registry into _output/bin/registry, for the tests that pull images,
# busybox into _output/bin/busybox, for the local test images, and the
# guest image into _output/bin/vm, for the tests internal/localvm runs on
# cgroup v2.
#
# Built binaries are also kept in a machine-wide cache ($NODEKIT_CACHE,
# default /var/cache/nodekit) so a fresh clone on the same machine does not
# rebuild them. A cold kubelet build takes minutes on 2 cores.
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

pkg_of() { # name -> "package cgo [test]"
  case $1 in
  kube-apiserver) echo "k8s.io/kubernetes/cmd/kube-apiserver 1" ;;
  agnhost) echo "k8s.io/kubernetes/test/images/agnhost 0" ;;
  kubelet) echo "k8s.io/kubernetes/cmd/kubelet 1" ;;
  kube-controller-manager) echo "k8s.io/kubernetes/cmd/kube-controller-manager 1" ;;
  kube-scheduler) echo "k8s.io/kubernetes/cmd/kube-scheduler 1" ;;
  ginkgo) echo "github.com/onsi/ginkgo/v2/ginkgo 0" ;;
  e2e.test) echo "k8s.io/kubernetes/test/e2e 1 test" ;;
  *) return 1 ;;
  esac
}

defaults=(kube-apiserver kube-controller-manager kube-scheduler agnhost kubelet)
names=()
containerd2=
registry=
busybox=
vm=
if [ $# -eq 0 ]; then
  names=("${defaults[@]}")
  containerd2=1
  registry=1
  busybox=1
  vm=1
fi
for arg in "$@"; do
  case $arg in
  conformance)
    names+=("${defaults[@]}" ginkgo e2e.test)
    containerd2=1
    registry=1
    busybox=1
    vm=1
    ;;
  containerd2) containerd2=1 ;;
  registry) registry=1 ;;
  busybox) busybox=1 ;;
  vm) vm=1 ;;
  *)
    if ! pkg_of "$arg" >/dev/null; then
      echo "build-tools: unknown binary $arg (known: ${defaults[*]} ginkgo e2e.test containerd2 registry busybox vm, or conformance)" >&2
      exit 2
    fi
    names+=("$arg")
    ;;
  esac
done
for name in "${names[@]}"; do
  # shellcheck disable=SC2046 # pkg_of prints the words build takes
  build "$name" $(pkg_of "$name")
done
if [ -n "$containerd2" ]; then
  bash hack/build-containerd2.sh
fi
if [ -n "$registry" ]; then
  bash hack/build-registry.sh
fi
if [ -n "$busybox" ]; then
  bash hack/build-busybox.sh
fi
if [ -n "$vm" ]; then
  bash hack/build-vm.sh
fi
