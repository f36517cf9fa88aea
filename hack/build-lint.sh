#!/usr/bin/env bash
# Builds golangci-lint (the version hack/tools-lint requires) into
# _output/bin, only when missing or when the tools module names another
# version. The binary is also kept in $NODEKIT_CACHE (default
# /var/cache/nodekit) per version, so a fresh clone on the same machine
# copies it instead of rebuilding: a cold build compiles some 300 packages
# and takes minutes on 2 cores, so it runs under nice.
set -euo pipefail
cd "$(dirname "$0")/.."
# golangci-lint --version prints these; without them it says "dev". The
# module's version has its "v" cut (main.version wants 2.15.0).
. hack/lib/go-tool.sh
lintver=$(cd hack/tools-lint && go list -m -f '{{.Version}}' github.com/golangci/golangci-lint/v2)
build_go_tool build-lint golangci-lint hack/tools-lint github.com/golangci/golangci-lint/v2 \
  github.com/golangci/golangci-lint/v2/cmd/golangci-lint \
  "-X main.version=${lintver#v} -X main.commit=module -X main.date=unknown" \
  "the first build takes minutes"
