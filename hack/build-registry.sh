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
# registry --version prints this; without it it says "v3.0.0+unknown".
. hack/lib/go-tool.sh
build_go_tool build-registry registry hack/tools-registry github.com/distribution/distribution/v3 \
  github.com/distribution/distribution/v3/cmd/registry \
  "-X github.com/distribution/distribution/v3/version.version=VERSION"
