#!/usr/bin/env bash
# Runs the upstream node conformance suite against a local single-node
# cluster whose node is fullagent (default) or the upstream kubelet:
#   bash hack/conformance.sh [--agent=fullagent|kubelet] [--containerd=1.6|2] [--features|--gated-only|--dra] [--serial] [--procs=12] [--focus=REGEX]
# Builds (once) kube-controller-manager, kube-scheduler, kubelet, ginkgo and
# e2e.test v1.37.2 into _output/bin. Must run as root. Reports land in
# _output/conformance/AGENT-containerdVERSION[-features|-gated] (junit.xml, logs/,
# specs.txt); `go run ./hack/conformance compare DIR_A DIR_B` compares two.
set -euo pipefail
cd "$(dirname "$0")/.."
bash hack/install-deps.sh
bash hack/build-tools.sh conformance
exec go run ./hack/conformance "$@"
