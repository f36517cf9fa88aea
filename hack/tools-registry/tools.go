//go:build tools

// Package tools pins the CNCF distribution registry, built by
// hack/build-registry.sh into _output/bin/registry so integration tests can
// pull images from a registry on loopback (internal/localregistry). It is a
// module of its own so that the registry's dependencies (storage drivers,
// tracing, redis clients) stay out of the library's go.mod. It is never
// imported.
package tools

import (
	_ "github.com/distribution/distribution/v3/cmd/registry"
)
