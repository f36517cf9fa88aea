#!/usr/bin/env bash
# Starts nodekit's local environment, detached: etcd + kube-apiserver v1.37.2
# on loopback ports (state in _output/local/controlplane). Idempotent: on a
# healthy environment it only says "already up". Extra arguments go to
# `localenv up`, e.g. --node NAME (repeatable) or --dir DIR.
# Needs the binaries from `make tools` (kube-apiserver in _output/bin, etcd).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec go run ./hack/localenv up "$@"
