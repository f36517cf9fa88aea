#!/usr/bin/env bash
# Runs N hollow nodes (examples/hollow) against a private etcd +
# kube-apiserver and reports whether they stay Ready, their RSS, CPU and
# API requests (see hack/scale/main.go):
#   bash hack/scale.sh N [--pods-per-node 10] [--duration 2m] [--timeout 10m]
# Needs the control-plane binaries (`bash hack/build-tools.sh`); no root.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ] || ! [[ $1 =~ ^[0-9]+$ ]]; then
  echo "usage: bash hack/scale.sh N [flags of go run ./hack/scale]" >&2
  exit 2
fi
nodes=$1
shift
exec go run ./hack/scale --nodes "$nodes" "$@"
